# libhdsm loads the CUDA runtime with dlopen when its cuda backend opens, so it loads where no CUDA
# toolkit is installed and a missing runtime or driver is an error it reports: no libcudart (nor
# libcuda, which cudart opens itself) may be among the libraries it needs.
# cmake -DOBJDUMP=<objdump> -DLIB=<libhdsm.so> -P check_no_cudart.cmake
execute_process(COMMAND ${OBJDUMP} -p ${LIB} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -p ${LIB} failed (${rc}): ${err}")
endif()
if(NOT out MATCHES "NEEDED")
  message(FATAL_ERROR "${OBJDUMP} -p ${LIB} lists no NEEDED libraries:\n${out}")
endif()
if(out MATCHES "NEEDED +(libcuda[^\n]*)")
  message(FATAL_ERROR "${LIB} needs ${CMAKE_MATCH_1}; it must load the CUDA runtime on demand (src/device/cuda/cudart.hpp)")
endif()
message(STATUS "${LIB} needs no CUDA library")
