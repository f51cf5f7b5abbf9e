# Included by the check_bench_*.cmake scripts: runs `hdsm bench ${SUITE} --quick` into a fresh
# ${OUT} and fails with the transcript unless it succeeds; leaves `out` and `transcript` set.
# -DDEVICE=<spec> runs it on that device (`--device`); the including script may set `bench_args`
# to more options.
file(REMOVE_RECURSE ${OUT})
set(device_args "")
if(DEFINED DEVICE)
  set(device_args --device ${DEVICE})
endif()
execute_process(COMMAND ${HDSM} bench ${SUITE} --quick --out ${OUT} ${device_args} ${bench_args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(transcript "exit: ${rc}\n--- stdout ---\n${out}--- stderr ---\n${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "hdsm bench ${SUITE} --quick ${bench_args} failed\n${transcript}")
endif()

# Fails with the transcript unless the summary (standard output) matches every regex given.
function(expect_summary)
  foreach(metric IN LISTS ARGN)
    if(NOT out MATCHES "${metric}")
      message(FATAL_ERROR "the summary lacks '${metric}'\n${transcript}")
    endif()
  endforeach()
endfunction()

# Fails unless ${OUT}/<file> has a line that starts with each regex given.
function(expect_rows file)
  file(READ ${OUT}/${file} content)
  foreach(row IN LISTS ARGN)
    if(NOT content MATCHES "\n${row}")
      message(FATAL_ERROR "${file} has no '${row}' row")
    endif()
  endforeach()
endfunction()

# Fails unless ${OUT} holds every file named.
function(expect_files)
  foreach(name IN LISTS ARGN)
    if(NOT EXISTS ${OUT}/${name})
      message(FATAL_ERROR "no ${name} in ${OUT}")
    endif()
  endforeach()
endfunction()
