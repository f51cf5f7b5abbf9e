# cmake -DCXX=<compiler> -DINCLUDE=<dir>;<dir> -DSOURCE=<file> -P check.cmake
# Compiles SOURCE (syntax only, C++20) and checks the result its first line announces:
# "// expect: compiles", "// expect: compiles without warnings" (-Wall -Wextra -Wpedantic -Werror,
# as a program that builds with warnings as errors), or "// expect: <text>" for a compile error whose
# messages contain <text>.
cmake_minimum_required(VERSION 3.25)
file(READ ${SOURCE} text)  # not file(STRINGS): a ';' in the expected text would split it
string(REGEX MATCH "^// expect: [^\n]*" first "${text}")
string(REGEX REPLACE "^// expect: " "" expect "${first}")
set(flags -std=c++20 -fsyntax-only)
if(expect STREQUAL "compiles without warnings")
  list(APPEND flags -Wall -Wextra -Wpedantic -Werror)
  set(expect compiles)
endif()
foreach(dir IN LISTS INCLUDE)
  list(APPEND flags -I${dir})
endforeach()
execute_process(COMMAND ${CXX} ${flags} ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(expect STREQUAL "compiles")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${SOURCE} should compile:\n${err}")
  endif()
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled; it should fail with: ${expect}")
endif()
string(FIND "${err}" "${expect}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SOURCE} failed, but not with '${expect}':\n${err}")
endif()
