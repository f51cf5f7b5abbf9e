# Run `hdsm bench crc --quick` into a fresh folder and check that every figure is there with the data
# behind it: Fig. 10's variants, the lock and barrier plots, Fig. 11's conflict misses, and the three
# times of Figs. 12 and 13 (one worker, many, OpenMP). Each app's output is checked by the suite
# against its reference before its time counts.
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -DEXPECT_SVG=ON|OFF -P check_bench_crc.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE crc)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
foreach(metric "fig10 fetch 8 KiB pages: protocol / raw copy +[0-9.]+x +(met|missed): target <= 2"
               "fig10 flush 8 KiB pages: single-writer / raw copy" "lock acquire \\+ release latency with 1 worker"
               "stream conflict misses at 4 KiB pages" "md optimized time / OpenMP")
  if(NOT out MATCHES "${metric}")
    message(FATAL_ERROR "the summary lacks '${metric}'\n${transcript}")
  endif()
endforeach()
file(READ ${OUT}/crc.csv csv)
if(NOT csv MATCHES "^experiment,app,variant,page,workers,seconds,ratio,conflict_misses\n")
  message(FATAL_ERROR "crc.csv has other columns\n${csv}")
endif()
foreach(row "fig10,fetch,raw copy," "sync,lock,on own cores,0,1," "fig11,jacobi,plain,4096,"
            "fig12 one worker,cg,plain,4096,1," "fig13 OpenMP,cg,OpenMP beside plain,0," "fig12,cg,optimized," "fig13,ep,plain,")
  if(NOT csv MATCHES "\n${row}")
    message(FATAL_ERROR "crc.csv has no '${row}' row\n${csv}")
  endif()
endforeach()
if(EXPECT_SVG)
  foreach(plot fig10-fetch fig10-flush sync-lock sync-barrier fig11 fig12 fig13)
    if(NOT EXISTS ${OUT}/crc-${plot}.svg)
      message(FATAL_ERROR "no crc-${plot}.svg")
    endif()
  endforeach()
endif()
message(STATUS "ok: ${OUT}")
