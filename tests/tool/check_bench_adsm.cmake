# Run `hdsm bench adsm --quick` into a fresh folder and check that every experiment reported.
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -P check_bench_adsm.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE adsm)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
if(DEFINED DEVICE AND NOT transcript MATCHES "adsm on ${DEVICE}[0-9]")
  message(FATAL_ERROR "the suite did not run on a ${DEVICE} device\n${transcript}")
endif()
foreach(metric "parboil lazy time / explicit" "parboil rolling bytes / explicit" "parboil batch worst slow-down"
               "rolling \\(256 KiB\\) bytes per step / lazy" "fault handling / raw round trip"
               "pointer -> block lookup")
  if(NOT out MATCHES "${metric}")
    message(FATAL_ERROR "the summary lacks '${metric}'\n${transcript}")
  endif()
endforeach()

file(READ ${OUT}/adsm.csv csv)
foreach(app cp mri-q mri-fhd sad tpacf pns rpes)
  foreach(version explicit batch lazy rolling)
    if(NOT csv MATCHES "\nparboil,${app},${version},")
      message(FATAL_ERROR "adsm.csv has no parboil row for ${app} ${version}")
    endif()
  endforeach()
endforeach()
foreach(experiment stencil vecadd link tpacf fault lookup)
  if(NOT csv MATCHES "\n${experiment},")
    message(FATAL_ERROR "adsm.csv has no ${experiment} rows")
  endif()
endforeach()
message(STATUS "ok: ${OUT}")
