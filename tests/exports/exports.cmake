# Checks what the shared libraries export (they are built with hidden symbols by default):
#  - libhdsm.so: every function <hdsm/hdsm.h> declares, the interposed libc I/O calls, and none of
#    the backends' or the runtime's private code;
#  - libhdsm_preload.so: the interposed memcpy, memmove, memset, and the I/O and signal calls again
#    (for programs that do not link libhdsm.so, which then comes after libc), with their _chk forms,
#    and the marker libhdsm.so tells its definitions by, nothing else;
#  - libhdsm_mpi.so: MPI calls, and of its own code only what the tests reach (named below).
# Arguments: NM, HEADER (hdsm.h), HDSM, PRELOAD, MPI (a library path, or empty), SANITIZE (the
# preset's HDSM_SANITIZE).
function(exported out library)
  execute_process(COMMAND ${NM} -D -C --defined-only ${library} OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} -D ${library} failed (${rc})")
  endif()
  # "address type name": keep the names
  string(REGEX REPLACE "(^|\n)[0-9a-f]+ [A-Za-z] " "\\1" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(require text what)
  foreach(name IN LISTS ARGN)
    if(NOT text MATCHES "(^|\n)${name}(\n|$)")
      message(SEND_ERROR "${what} does not export ${name}")
    endif()
  endforeach()
endfunction()

function(forbid text what)
  foreach(pattern IN LISTS ARGN)
    string(REGEX MATCH "(^|\n)[^\n]*${pattern}[^\n]*" hit "${text}")
    if(hit)
      string(STRIP "${hit}" hit)
      message(SEND_ERROR "${what} exports ${hit}, which should be hidden")
    endif()
  endforeach()
endfunction()

exported(hdsm ${HDSM})
file(STRINGS ${HEADER} declarations REGEX "^[a-z].*[ *]hdsm_[a-z_]+\\(")
list(LENGTH declarations count)
if(count LESS 20)
  message(FATAL_ERROR "found only ${count} function declarations in ${HEADER}")
endif()
foreach(line IN LISTS declarations)
  string(REGEX MATCH "hdsm_[a-z_]+\\(" name "${line}")
  string(REPLACE "(" "" name "${name}")
  require("${hdsm}" libhdsm ${name})
endforeach()
require("${hdsm}" libhdsm read write pread pwrite readv writev preadv pwritev preadv64 pwritev64 preadv2 pwritev2 preadv64v2 pwritev64v2 fread fwrite recv recvfrom recvmsg send sendto sendmsg
        recvmmsg sendmmsg
        "hdsm::Runtime::Runtime\\(hdsm::Config\\)")
# sigaction and the signal() family, which chain later SIGSEGV/SIGBUS handlers behind hdsm's; not under
# ThreadSanitizer, whose runtime calls sigaction before it can run instrumented code (and keeps the
# handlers in its own table).
if(NOT SANITIZE STREQUAL "thread")
  require("${hdsm}" libhdsm sigaction signal bsd_signal sysv_signal __sysv_signal)
endif()
forbid("${hdsm}" libhdsm "hdsm::opencl::" "hdsm::cuda::" "hdsm::sim::SimDevice" "hdsm::obs::Tracer::"
       "hdsm::exec::FiberWorker"
       "hdsm::detail::UnifiedModel" "hdsm::BufferTable<" "fmt::v[0-9]+::")

exported(preload ${PRELOAD})
string(REGEX REPLACE "\n$" "" preload "${preload}")
string(REPLACE "\n" ";" names "${preload}")
list(SORT names)
set(expected __fread_chk __memcpy_chk __memmove_chk __memset_chk __pread64_chk __pread_chk __read_chk __recv_chk
    __recvfrom_chk fread fread_unlocked fwrite fwrite_unlocked hdsm_preload_library memcpy memmove memset pread pread64
    preadv preadv2 preadv64 preadv64v2 pwrite pwrite64 pwritev pwritev2 pwritev64 pwritev64v2 read readv recv recvfrom recvmmsg recvmsg send sendmmsg sendmsg
    sendto write writev)
# And the signal calls, as libhdsm's, for programs that do not link libhdsm.so.
if(NOT SANITIZE STREQUAL "thread")
  list(APPEND expected __sysv_signal bsd_signal sigaction signal sysv_signal)
endif()
list(SORT expected)
if(NOT names STREQUAL expected)
  message(SEND_ERROR "libhdsm_preload exports '${names}', not '${expected}'")
endif()

if(MPI)
  exported(mpi ${MPI})
  require("${mpi}" libhdsm_mpi MPI_Send MPI_Recv MPI_Allreduce "hdsm::mpi::receive_buffers\\(hdsm::Runtime const&\\)")
  string(REGEX MATCHALL "(^|\n)hdsm::mpi::[A-Za-z_]+" own "${mpi}")  # the names, not their arguments' types
  list(TRANSFORM own STRIP)
  list(REMOVE_DUPLICATES own)
  list(SORT own)
  # receive_buffers, and start and finish, through which the tests drive an operation of their own
  set(meant hdsm::mpi::finish hdsm::mpi::receive_buffers hdsm::mpi::start)
  if(NOT own STREQUAL meant)
    message(SEND_ERROR "libhdsm_mpi exports its own '${own}'; only '${meant}' are meant to be")
  endif()
endif()
