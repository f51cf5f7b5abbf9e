# Run `hdsm bench cluster --quick` into a fresh folder and check what the report and the data hold:
# the one-rank overhead, the bytes against the minimum, and lazy against eager on the same 3 ranks
# (the lazy plots read only those runs: before, the eager group showed the 2-rank run).
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -DEXPECT_SVG=ON|OFF -P check_bench_cluster.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE cluster)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
foreach(metric "cp: one rank x [0-9]+ threads / baseline x [0-9]+ +[0-9.]+x +(met|missed): target <= 1.05"
               ": page records sent / minimum" "blackscholes 3x[0-9]+: bytes on the wire saved by lazy update"
               "blackscholes 3x[0-9]+: time lazy / eager")
  if(NOT out MATCHES "${metric}")
    message(FATAL_ERROR "the summary lacks '${metric}'\n${transcript}")
  endif()
endforeach()
file(READ ${OUT}/cluster.csv csv)
foreach(mode lazy shared private)
  if(NOT csv MATCHES "\nblackscholes,lazy,${mode},3 ranks x ")
    message(FATAL_ERROR "cluster.csv has no 3-rank '${mode}' row of the lazy comparison\n${csv}")
  endif()
endforeach()
file(READ ${OUT}/report.md report)
if(NOT report MATCHES "Other work on the machine: [0-9.]+ threads")
  message(FATAL_ERROR "report.md does not say how busy the machine was")
endif()
if(EXPECT_SVG)
  foreach(plot fig3 lazy lazy-time)
    if(NOT EXISTS ${OUT}/cluster-${plot}.svg)
      message(FATAL_ERROR "no cluster-${plot}.svg")
    endif()
  endforeach()
endif()
message(STATUS "ok: ${OUT}")
