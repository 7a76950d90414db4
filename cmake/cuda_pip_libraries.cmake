# A CUDA build of torch from pip brings the CUDA math libraries (cuBLAS, cuSPARSE, cuSOLVER, cuFFT, cuRAND, NVRTC) as
# nvidia-* wheels, and a CUDA toolkit installed for compiling only may lack them. Torch's CMake config needs their
# libraries (imported targets CUDA::cublas, ...) and ATen/cuda/CUDAContext.h includes their headers, so when the toolkit
# has none, take both from the wheels beside torch. Layouts: nvidia/cu13/{include,lib} (CUDA 13) or
# nvidia/<library>/{include,lib} (CUDA 12). Linking uses the versioned files (libcublas.so.13); the wheels ship no
# unversioned libcublas.so, and at run time torch has already loaded the same libraries.
set(_toolkit_include "${CUDA_TOOLKIT_ROOT_DIR}/include")
if(EXISTS "${_toolkit_include}/cublas_v2.h")
  return()
endif()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), 'nvidia'))"
  OUTPUT_VARIABLE _nvidia_dir OUTPUT_STRIP_TRAILING_WHITESPACE)
file(GLOB _wheel_includes LIST_DIRECTORIES true "${_nvidia_dir}/*/include")
file(GLOB _wheel_libs LIST_DIRECTORIES true "${_nvidia_dir}/*/lib")
if(NOT _wheel_includes)
  message(FATAL_ERROR "mma_nmt: the CUDA toolkit at ${CUDA_TOOLKIT_ROOT_DIR} has no cuBLAS headers and no nvidia-* wheels "
                      "were found beside torch (${_nvidia_dir}). Install a full CUDA toolkit or torch's CUDA wheels.")
endif()

# Libraries: set the cache variables that FindCUDAToolkit would otherwise search for (it keeps ones already found).
foreach(_lib cublas cublasLt cufft curand cusparse cusolver nvrtc nvJitLink)
  if(CUDA_${_lib}_LIBRARY)
    continue()
  endif()
  set(_candidates "")
  foreach(_dir IN LISTS _wheel_libs)
    file(GLOB _found "${_dir}/lib${_lib}.so.[0-9]*")
    list(APPEND _candidates ${_found})
  endforeach()
  if(_candidates)
    list(SORT _candidates)
    list(GET _candidates 0 _first)
    set(CUDA_${_lib}_LIBRARY "${_first}" CACHE FILEPATH "CUDA ${_lib} library (from torch's nvidia-* wheel)")
  endif()
endforeach()

# Headers: only the math libraries' headers, linked into one folder, so that the runtime headers still come from the
# toolkit that matches nvcc (the cu13 wheel also ships cuda_runtime.h of another patch release).
set(MMA_NMT_CUDA_MATH_INCLUDE "${CMAKE_BINARY_DIR}/cuda_math_include")
file(MAKE_DIRECTORY "${MMA_NMT_CUDA_MATH_INCLUDE}")
foreach(_dir IN LISTS _wheel_includes)
  file(GLOB _headers "${_dir}/cublas*.h" "${_dir}/cusparse*.h" "${_dir}/cusolver*.h" "${_dir}/cufft*.h"
       "${_dir}/curand*.h" "${_dir}/cudalibxt.h" "${_dir}/nvrtc.h" "${_dir}/nvJitLink.h")
  foreach(_header IN LISTS _headers)
    get_filename_component(_name "${_header}" NAME)
    if(NOT EXISTS "${_toolkit_include}/${_name}")
      file(CREATE_LINK "${_header}" "${MMA_NMT_CUDA_MATH_INCLUDE}/${_name}" SYMBOLIC)
    endif()
  endforeach()
endforeach()
message(STATUS "mma_nmt: CUDA math libraries and headers taken from ${_nvidia_dir}")
