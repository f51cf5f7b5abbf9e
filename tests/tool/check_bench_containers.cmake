# Run `hdsm bench containers --quick` into a fresh folder and check that every app reported with and
# without the containers' communication optimization, on one and two devices (each run's output is
# checked against its reference by the suite itself before its time counts).
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -P check_bench_containers.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE containers)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
foreach(app mandelbrot mse ppmcc)
  foreach(where "1 device" "2 devices")
    if(NOT out MATCHES "${app} on ${where}: No CMO time / CMO +[0-9.]+x")
      message(FATAL_ERROR "the summary lacks ${app} on ${where}\n${transcript}")
    endif()
  endforeach()
endforeach()
file(READ ${OUT}/containers.csv csv)
foreach(row "fig6,ppmcc,1,\"CMO, 1 device\"," "fig6,ppmcc,2,\"No CMO, 2 devices\",")
  if(NOT csv MATCHES "\n${row}")
    message(FATAL_ERROR "containers.csv has no '${row}' row")
  endif()
endforeach()
if(NOT EXISTS ${OUT}/containers-fig6.svg)
  message(FATAL_ERROR "no containers-fig6.svg")
endif()
message(STATUS "ok: ${OUT}")
