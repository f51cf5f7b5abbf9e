# Run `hdsm bench cluster --quick` into a fresh folder and check what the report and the data hold:
# the one-rank overhead, the speed-ups over one rank's threads (the seed's) and over as many cores,
# the bytes against the minimum, and lazy against eager on the same 3 ranks (the lazy plots read
# only those runs: before, the eager group showed the 2-rank run).
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -DEXPECT_SVG=ON|OFF -P check_bench_cluster.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE cluster)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
expect_summary("cp: one rank x [0-9]+ threads / baseline x [0-9]+ +[0-9.]+x +(met|missed): target <= 1.05"
               "cp: speed-up of 2 ranks x [0-9]+ over the baseline x [0-9]+ +[0-9.]+x +ideal 2; seed 004 Fig. 3"
               "cp: speed-up of 2 ranks x [0-9]+ over the baseline x [0-9]+ +[0-9.]+x +ideal 1: the same cores"
               ": page records sent / minimum" "blackscholes 3x[0-9]+: bytes on the wire saved by lazy update"
               "blackscholes 3x[0-9]+: time lazy / eager")
expect_rows(cluster.csv "blackscholes,lazy,lazy,3 ranks x " "blackscholes,lazy,shared,3 ranks x "
            "blackscholes,lazy,private,3 ranks x ")
file(READ ${OUT}/report.md report)
if(NOT report MATCHES "Other work on the machine: spinning on each of the [0-9]+ usable cores for 50 ms, this process got [0-9.]+ of their time")
  message(FATAL_ERROR "report.md does not say how busy the machine was")
endif()
if(EXPECT_SVG)
  expect_files(cluster-fig3.svg cluster-lazy.svg cluster-lazy-time.svg)
endif()
message(STATUS "ok: ${OUT}")
