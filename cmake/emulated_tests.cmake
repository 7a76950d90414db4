# The emulated CUDA kernel tests (tests/cpp/emulated): every hand-written CUDA kernel's device source compiled by the
# host compiler against the HIP CPU runtime, run on CPU tensors and compared with the CPU operators. Included from
# CMakeLists.txt when MMA_NMT_BUILD_TESTS is on.
#
# The runtime is header-only; it is looked for at ../shared/third_party/hip-cpu beside the repository, or wherever
# MMA_NMT_HIP_CPU_DIR points. Without it, ctest reports one skipped test saying why.
set(MMA_NMT_HIP_CPU_DIR "${CMAKE_CURRENT_SOURCE_DIR}/../shared/third_party/hip-cpu"
    CACHE PATH "HIP CPU runtime (header-only) for the emulated CUDA kernel tests")
# AUTO builds them when the runtime is found; ON (CI) makes a missing runtime an error; OFF skips them.
set(MMA_NMT_EMULATED_TESTS "AUTO" CACHE STRING "Build the emulated CUDA kernel tests: AUTO, ON or OFF")
string(TOUPPER "${MMA_NMT_EMULATED_TESTS}" _emulated_mode)

set(_skip_reason "")
if(_emulated_mode STREQUAL "OFF")
  set(_skip_reason "MMA_NMT_EMULATED_TESTS=OFF")
elseif(MMA_NMT_WITH_CUDA)
  # The emulated kernels are the same inline functions and templates as the nvcc-compiled ones, built differently;
  # one binary must not hold both. With CUDA kernels built, the CUDA pytest suite (pytest -m cuda) tests them on a GPU.
  set(_skip_reason "this build compiles the CUDA kernels with nvcc; the emulated tests are built in CPU-only builds")
elseif(NOT EXISTS "${MMA_NMT_HIP_CPU_DIR}/include/hip/hip_runtime.h")
  set(_skip_reason "the HIP CPU runtime was not found at ${MMA_NMT_HIP_CPU_DIR} (set MMA_NMT_HIP_CPU_DIR to its folder)")
endif()

if(_skip_reason AND _emulated_mode STREQUAL "ON")
  message(FATAL_ERROR "mma_nmt: MMA_NMT_EMULATED_TESTS=ON but the emulated CUDA kernel tests cannot be built: "
                      "${_skip_reason}")
endif()
if(_skip_reason)
  message(STATUS "mma_nmt: emulated CUDA kernel tests skipped: ${_skip_reason}")
  add_test(NAME EmulatedCudaKernels.Skipped
           COMMAND ${CMAKE_COMMAND} -E echo "emulated CUDA kernel tests skipped: ${_skip_reason}")
  # `cmake -E echo` exits 0; ctest counts the test as skipped when its output says so.
  set_tests_properties(EmulatedCudaKernels.Skipped PROPERTIES SKIP_REGULAR_EXPRESSION "skipped")
  return()
endif()

message(STATUS "mma_nmt: emulated CUDA kernel tests with the HIP CPU runtime at ${MMA_NMT_HIP_CPU_DIR}")
find_package(Threads REQUIRED)
add_executable(mma_nmt_emulated_cuda_tests
  tests/cpp/emulated/emulated_testing.cpp
  tests/cpp/emulated/test_emulated_attention.cpp
  tests/cpp/emulated/test_emulated_flash_sequence_starts.cpp
  tests/cpp/emulated/test_emulated_gmm.cpp
  tests/cpp/emulated/test_emulated_gmm_mixture.cpp
  tests/cpp/emulated/test_emulated_multihop_luong.cpp
  tests/cpp/emulated/test_emulated_second_hop.cpp
)
target_compile_definitions(mma_nmt_emulated_cuda_tests PRIVATE MMA_NMT_EMULATE_CUDA)
target_include_directories(mma_nmt_emulated_cuda_tests SYSTEM PRIVATE "${MMA_NMT_HIP_CPU_DIR}/include")
target_link_libraries(mma_nmt_emulated_cuda_tests PRIVATE mma_nmt_kernels GTest::gtest_main Threads::Threads)
# Device code runs on the emulator's fibers, whose stacks are 7 KiB: any frame over 4 KiB is an error. `#pragma unroll`
# is nvcc's. Optimised whatever the build type, as every shuffle is a round of fiber switches.
target_compile_options(mma_nmt_emulated_cuda_tests PRIVATE -O2 -Wall -Wextra -Wno-unused-parameter
                       -Wno-unknown-pragmas -Werror=stack-usage=4096)
gtest_discover_tests(mma_nmt_emulated_cuda_tests DISCOVERY_TIMEOUT 60)
