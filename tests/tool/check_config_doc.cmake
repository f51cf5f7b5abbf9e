# Check that docs/configuration.md is exactly what `hdsm config --markdown` prints.
#   cmake -DHDSM=<hdsm executable> -DDOC=<docs/configuration.md> -DGENERATED=<scratch file>
#         -P check_config_doc.cmake
cmake_minimum_required(VERSION 3.25)

execute_process(COMMAND ${HDSM} config --markdown
                RESULT_VARIABLE rc OUTPUT_FILE ${GENERATED} ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "hdsm config --markdown failed (exit ${rc}):\n${err}")
endif()
if(NOT EXISTS ${DOC})
  message(FATAL_ERROR "${DOC} is missing; create it with:\n  ${HDSM} config --markdown > ${DOC}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DOC} ${GENERATED} RESULT_VARIABLE different)
if(different)
  find_program(DIFF diff)
  if(DIFF)
    execute_process(COMMAND ${DIFF} -u ${DOC} ${GENERATED})  # the diff goes straight to the test log
  endif()
  message(FATAL_ERROR "${DOC} is out of date with the knob list (src/runtime/knobs.def); regenerate it with\n"
                      "  ${HDSM} config --markdown > ${DOC}")
endif()
message(STATUS "ok: ${DOC} matches hdsm config --markdown")
