# Run a command and check its exit code and output.
#   cmake -DEXPECT_EXIT=<n|nonzero> [-DMATCH1=<regex> ... -DMATCH9=<regex>] [-DNOMATCH1=<regex> ...]
#         [-DERRMATCH1=<regex> ...]
#         -P check_command.cmake -- <program> [args...]
# MATCHn must all be found in stdout+stderr, NOMATCHn must not be, ERRMATCHn must be in stderr. EXPECT_EXIT=nonzero accepts any
# ordinary non-zero exit status but not a crash.
cmake_minimum_required(VERSION 3.25)

set(command "")
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()
if(NOT command)
  message(FATAL_ERROR "usage: cmake -DEXPECT_EXIT=... -P check_command.cmake -- <program> [args...]")
endif()
if(NOT DEFINED EXPECT_EXIT)
  set(EXPECT_EXIT 0)
endif()

execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(JOIN " " shown ${command})
set(transcript "command: ${shown}\nexit: ${rc}\n--- stdout ---\n${out}--- stderr ---\n${err}")

if(EXPECT_EXIT STREQUAL "nonzero")
  if(NOT rc MATCHES "^[0-9]+$" OR rc EQUAL 0)
    message(FATAL_ERROR "expected a non-zero exit status\n${transcript}")
  endif()
elseif(NOT rc STREQUAL EXPECT_EXIT)
  message(FATAL_ERROR "expected exit status ${EXPECT_EXIT}\n${transcript}")
endif()

foreach(n RANGE 1 9)
  if(DEFINED MATCH${n} AND NOT "${out}${err}" MATCHES "${MATCH${n}}")
    message(FATAL_ERROR "output does not match '${MATCH${n}}'\n${transcript}")
  endif()
  if(DEFINED NOMATCH${n} AND "${out}${err}" MATCHES "${NOMATCH${n}}")
    message(FATAL_ERROR "output matches '${NOMATCH${n}}' but should not\n${transcript}")
  endif()
  if(DEFINED ERRMATCH${n} AND NOT "${err}" MATCHES "${ERRMATCH${n}}")
    message(FATAL_ERROR "stderr does not match '${ERRMATCH${n}}'\n${transcript}")
  endif()
endforeach()
message(STATUS "ok: ${shown}")
