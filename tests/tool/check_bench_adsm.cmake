# Run `hdsm bench adsm --quick` into a fresh folder and check that every experiment reported.
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> [-DDEVICE=<spec>] [-DUM=ON] -P check_bench_adsm.cmake
# With UM (`--um`), or on a CUDA device, the parboil experiment must also have the unified memory
# versions and the issue's targets as summary rows.
cmake_minimum_required(VERSION 3.25)

set(SUITE adsm)
set(bench_args "")
set(unified OFF)
if(UM)
  set(bench_args --um)
  set(unified ON)
endif()
if(DEFINED DEVICE AND DEVICE MATCHES "^cuda")
  set(unified ON)
endif()
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

set(versions explicit batch lazy rolling)
# host-mapped: where the device shares host memory (PoCL's CPU device) and wherever the unified memory
# columns are (--um, a CUDA device).
if(unified OR (DEFINED DEVICE AND DEVICE MATCHES "^opencl"))
  list(APPEND versions host-mapped)
  set(metrics "parboil host-mapped time / explicit" "iterate sparse reads host-mapped time / explicit"
              "target: iterate sparse reads host-mapped time / the faster of lazy and rolling < 1 +[0-9.]+x +(met|missed)"
              "iterate no reads host-mapped time / explicit")
  # The explicit version's time less its copies needs the device's own timing of kernels and copies,
  # which the CUDA backend does not take.
  if(NOT (DEFINED DEVICE AND DEVICE MATCHES "^cuda"))
    list(APPEND metrics
         "target: parboil host-mapped time / explicit time less its copies <= 1.1 on every app \\(worst\\) +[0-9.]+x +(met|missed)")
  endif()
  foreach(metric IN LISTS metrics)
    if(NOT out MATCHES "${metric}")
      message(FATAL_ERROR "the summary lacks '${metric}'\n${transcript}")
    endif()
  endforeach()
  # Host-mapped objects are the device's memory: no byte moves (0.5x passed the earlier check).
  if(NOT out MATCHES "parboil host-mapped bytes / explicit \\(geomean\\) +0x")
    message(FATAL_ERROR "host-mapped moved bytes\n${transcript}")
  endif()
endif()
file(READ ${OUT}/report.md report)
if(NOT report MATCHES "auto, the default HDSM_PROTOCOL, gives [a-z]+[0-9]+ the [a-z-]+ model")
  message(FATAL_ERROR "report.md does not say what auto gives the device")
endif()
if(unified)
  list(APPEND versions um um-prefetch)
  foreach(metric "parboil um time / explicit" "parboil um-prefetch time / explicit"
                 "target: parboil lazy time / explicit <= 1.03 \\(geomean\\) +[0-9.]+x +(met|missed)"
                 "target: parboil rolling time / explicit <= 1.03" "target: parboil lazy time / um <= 1 on every app"
                 "target: parboil rolling time / um <= 1 on every app")
    if(NOT out MATCHES "${metric}")
      message(FATAL_ERROR "the summary lacks '${metric}'\n${transcript}")
    endif()
  endforeach()
  if(out MATCHES "parboil um[-a-z]* bytes")
    message(FATAL_ERROR "the summary has a bytes ratio for unified memory, which moves nothing hdsm counts\n${transcript}")
  endif()
elseif(out MATCHES "parboil um")
  message(FATAL_ERROR "unified memory columns without --um on a device that is not CUDA\n${transcript}")
endif()
if(DEFINED DEVICE AND DEVICE MATCHES "^opencl" AND NOT out MATCHES "target: parboil lazy time / explicit <= 1.05")
  message(FATAL_ERROR "the summary lacks the OpenCL target (1.05x of explicit)\n${transcript}")
endif()

file(READ ${OUT}/adsm.csv csv)
foreach(app cp mri-q mri-fhd sad tpacf pns rpes)
  foreach(version ${versions})
    if(NOT csv MATCHES "\nparboil,${app},${version},")
      message(FATAL_ERROR "adsm.csv has no parboil row for ${app} ${version}")
    endif()
  endforeach()
endforeach()
foreach(workload "sparse reads" "no reads")
  foreach(version explicit lazy rolling)
    if(NOT csv MATCHES "\niterate,${workload},${version},")
      message(FATAL_ERROR "adsm.csv has no iterate row for ${workload} ${version}")
    endif()
  endforeach()
endforeach()
foreach(experiment stencil vecadd link tpacf fault lookup)
  if(NOT csv MATCHES "\n${experiment},")
    message(FATAL_ERROR "adsm.csv has no ${experiment} rows")
  endif()
endforeach()
message(STATUS "ok: ${OUT}")
