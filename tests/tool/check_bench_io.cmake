# Run `hdsm bench io --quick` into a fresh folder and check that every experiment reported (each
# version's data is checked by the suite itself before its time counts).
#   cmake -DHDSM=<hdsm executable> -DOUT=<folder> -P check_bench_io.cmake
cmake_minimum_required(VERSION 3.25)

set(SUITE io)
include(${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake)
expect_summary("file -> device 8 MiB: hdsm / double-buffered" "device -> file 32 MiB: speed-up of hdsm"
               "interposed memcpy of 8 B on host memory: added time")
expect_rows(io.csv "file -> device,hdsm," "file -> device,link only" "device -> file,double-buffered,"
            "memory,memset: hdsm on invalid blocks," "faults,8 threads," "interposition,memcpy libhdsm_preload,4096,"
            "interposition,memset libc,8,")
message(STATUS "ok: ${OUT}")
