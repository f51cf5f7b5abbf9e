# Run `hdsm bench hpe --quick` into a fresh folder and check that every version of seed 003 Fig. 7
# reported in both directions (and Fig. 8's wait rows), that every app of Figs. 9/10 reported every
# series on 1, 2 and 4 devices, and that the summary has the issue's target rows (each version's
# data, and each app's output, is checked by the suite itself before its time counts).
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -P check_bench_hpe.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE hpe)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
expect_summary("one-way hdsm staged / modelled link \\(>= 8 MiB, worst\\)" "one-way hdsm staged / naive \\(>= 8 MiB, worst\\)"
               "one-way hdsm peer / modelled link \\(>= 8 MiB\\)" "two-way hdsm peer / two-way hdsm staged \\(>= 8 MiB\\)")
file(READ ${OUT}/hpe.csv csv)
# Fig. 7 rows by direction, and Fig. 8's CPU thread wait rows.
foreach(figure fig7 fig8)
  if(figure STREQUAL "fig8")
    set(versions "double-buffered \\(locked\\)" "hdsm staged")
  else()
    set(versions naive pinned double-buffered "hdsm staged" "hdsm peer")
  endif()
  foreach(direction one-way two-way)
    foreach(version ${versions})
      foreach(bytes 262144 8388608)
        if(NOT csv MATCHES "\n${figure},${direction},${version},${bytes},")
          message(FATAL_ERROR "hpe.csv has no '${figure},${direction},${version},${bytes}' row")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()
foreach(app stencil fft mergesort)
  foreach(version "explicit x1" "explicit x2" "explicit x4" "hdsm staged x2" "hdsm staged x4" "hdsm peer x2" "hdsm peer x4")
    if(NOT csv MATCHES "\nfig9-10,${app},${version},[0-9]+,")
      message(FATAL_ERROR "hpe.csv has no 'fig9-10,${app},${version}' row")
    endif()
  endforeach()
  foreach(metric "${app} best hdsm speedup over 1 device" "${app} % of time in exchanges"
                 "target: ${app} hdsm staged time / explicit <= 1.05 \\(worst\\)[ 0-9.x]+(met|missed)"
                 "target: ${app} hdsm peer time / explicit <= 1.05 \\(worst\\)[ 0-9.x]+(met|missed)")
    if(NOT out MATCHES "${metric}")
      message(FATAL_ERROR "the summary lacks '${metric}'\n${transcript}")
    endif()
  endforeach()
  foreach(figure fig9 fig10)
    if(NOT EXISTS ${OUT}/hpe-${figure}-${app}.svg)
      message(FATAL_ERROR "no plot hpe-${figure}-${app}.svg")
    endif()
  endforeach()
endforeach()
if(NOT out MATCHES "two-way CPU thread wait, hdsm staged / locked double-buffered")
  message(FATAL_ERROR "the summary lacks the Fig. 8 wait ratio\n${transcript}")
endif()
message(STATUS "ok: ${OUT}")
