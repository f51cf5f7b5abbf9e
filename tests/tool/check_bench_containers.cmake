# Run `hdsm bench containers --quick` into a fresh folder and check that every app reported with and
# without the containers' communication optimization, on one and two devices (each run's output is
# checked against its reference by the suite itself before its time counts), and that Table 1's
# byte counts (deterministic, unlike times) show its pattern for LU, NBody and SPH: peer copies cut
# the total to <= 0.70x, the new mechanism moves no more than the initial one and allocates >= 10x
# less.
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -P check_bench_containers.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE containers)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
foreach(app mandelbrot mse ppmcc nbody sph lu)
  foreach(where "1 device" "2 devices")
    if(NOT out MATCHES "${app} on ${where}: No CMO time / CMO +[0-9.]+x")
      message(FATAL_ERROR "the summary lacks ${app} on ${where}\n${transcript}")
    endif()
  endforeach()
endforeach()
foreach(app lu nbody sph)
  foreach(check "total moved, New CMO \\(peer\\) / New CMO;LESS_EQUAL;0.70"
                "total moved, New CMO / Initial CMO;LESS_EQUAL;1.0"
                "device memory allocated, Initial CMO / New CMO;GREATER_EQUAL;10")
    list(GET check 0 metric)
    list(GET check 1 op)
    list(GET check 2 bound)
    if(NOT out MATCHES "${app}: ${metric} +([0-9.]+)x")
      message(FATAL_ERROR "the summary lacks ${app}: ${metric}\n${transcript}")
    endif()
    set(value ${CMAKE_MATCH_1})
    if(NOT value ${op} ${bound})
      message(FATAL_ERROR "${app}: ${metric} is ${value}x, not ${op} ${bound}\n${transcript}")
    endif()
  endforeach()
endforeach()
if(NOT out MATCHES "Fig. 7: mean speedup of New CMO \\(peer\\) over Initial CMO +[0-9.]+x")
  message(FATAL_ERROR "the summary lacks Fig. 7's mean speedup\n${transcript}")
endif()
file(READ ${OUT}/containers.csv csv)
foreach(row "fig6,ppmcc,1,\"CMO, 1 device\"," "fig6,ppmcc,2,\"No CMO, 2 devices\"," "table1,lu,2,Initial CMO,"
            "table1,sph,2,New CMO \\(peer\\)," "table1-seed,nbody,2,New CMO,")
  if(NOT csv MATCHES "\n${row}")
    message(FATAL_ERROR "containers.csv has no '${row}' row")
  endif()
endforeach()
foreach(plot fig6 fig7)
  if(NOT EXISTS ${OUT}/containers-${plot}.svg)
    message(FATAL_ERROR "no containers-${plot}.svg")
  endif()
endforeach()
message(STATUS "ok: ${OUT}")
