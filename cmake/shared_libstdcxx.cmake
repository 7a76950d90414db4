# mma_nmt_link_shared_libstdcxx(<target>): link <target> to the shared libstdc++, never to a static copy of it.
#
# A library that carries its own static libstdc++ beside the shared one torch loads crashes where a stream of one copy
# meets the locale of the other: built on a GPU image by /opt/gcc/bin/g++, the extension did not need libstdc++.so.6,
# defined 4,637 std:: symbols, and died formatting an error message with c10::str
# (benchmarks/results/2026-11-26.cuda-quick.notes.md). g++ links libstdc++.a when its search path offers no libstdc++.so
# first, or when told -static-libstdc++ (by its specs or the flags). Naming the shared library on the link line, before
# the -lstdc++ that g++ appends, resolves every std:: symbol from it in both cases (checked with a small library here:
# 3,949 std:: definitions without it, none with it).
# tests/python/packaging/test_extension_linkage.py checks the built extension and this function.
function(mma_nmt_link_shared_libstdcxx target)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
    return()
  endif()
  # The compiler's own copy first (as new as the code it compiles), else the system's.
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE _libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _status)
  if(NOT _status EQUAL 0 OR NOT IS_ABSOLUTE "${_libstdcxx}" OR NOT EXISTS "${_libstdcxx}")
    find_library(MMA_NMT_SHARED_LIBSTDCXX NAMES libstdc++.so.6)
    set(_libstdcxx "${MMA_NMT_SHARED_LIBSTDCXX}")
  endif()
  if(NOT _libstdcxx)
    message(WARNING "mma_nmt: found no libstdc++.so.6 for ${CMAKE_CXX_COMPILER}; if it links libstdc++ statically, "
                    "${target} will crash beside torch's copy (benchmarks/results/2026-11-26.cuda-quick.notes.md)")
    return()
  endif()
  message(STATUS "mma_nmt: ${target} links the shared libstdc++ ${_libstdcxx}")
  target_link_libraries(${target} PUBLIC "${_libstdcxx}")
endfunction()
