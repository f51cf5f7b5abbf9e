# Run `hdsm bench crc --quick` into a fresh folder and check that every figure is there with the data
# behind it: Fig. 10's variants, the lock and barrier plots, Fig. 11's conflict misses, and the three
# times of Figs. 12 and 13 (one worker, many, OpenMP). Each app's output is checked by the suite
# against its reference before its time counts.
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -DEXPECT_SVG=ON|OFF -P check_bench_crc.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE crc)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
expect_summary("fig10 fetch 8 KiB pages: protocol / raw copy +[0-9.]+x +(met|missed): target <= 2"
               "fig10 flush 8 KiB pages: single-writer / raw copy" "lock acquire \\+ release latency with 1 worker"
               "stream conflict misses at 4 KiB pages" "md optimized time / OpenMP")
file(READ ${OUT}/crc.csv csv)
if(NOT csv MATCHES "^experiment,app,variant,page,workers,seconds,ratio,conflict_misses,raw_seconds\n")
  message(FATAL_ERROR "crc.csv has other columns\n${csv}")
endif()
# Each Fig. 10 variant's row holds the raw copies its ratio was taken against.
if(NOT csv MATCHES "\nfig10,fetch,protocol,8192,1,[0-9.e+-]+,[0-9.e+-]+,0,[0-9.e+-]+\n")
  message(FATAL_ERROR "crc.csv's Fig. 10 rows lack their own raw copy\n${csv}")
endif()
expect_rows(crc.csv "fig10,fetch,raw copy," "sync,lock,[a-z ]+,0,1," "fig11,jacobi,plain,4096,"
            "fig12 one worker,cg,plain,4096,1," "fig13 OpenMP,cg,OpenMP beside plain,0," "fig12,cg,optimized,"
            "fig13,ep,plain,")
# The suite uses no device, and says how much of the cores other work took while it ran.
file(READ ${OUT}/report.md report)
if(NOT report MATCHES "- device: none \\(the suites run on the host's CPUs\\)" OR
   NOT report MATCHES "During the suite, other processes \\(and the hypervisor\\) took [0-9.]+ of these cores' time")
  message(FATAL_ERROR "report.md names a device, or not the machine's other work during the suite")
endif()
file(READ ${OUT}/crc.json json)
if(NOT json MATCHES "\"device\": null" OR NOT json MATCHES "\"others_share_during\": [0-9.e-]+")
  message(FATAL_ERROR "crc.json names a device, or not the machine's other work during the suite")
endif()
if(EXPECT_SVG)
  expect_files(crc-fig10-fetch.svg crc-fig10-flush.svg crc-sync-lock.svg crc-sync-barrier.svg crc-fig11.svg
               crc-fig12.svg crc-fig13.svg)
endif()
message(STATUS "ok: ${OUT}")
