# Finds the LibTorch the build was pointed at, before find_package(Torch).
#
# A LibTorch inside an installed PyTorch (site-packages/torch, the CMake prefix that
# `torch.utils.cmake_prefix_path` prints) needs two corrections:
# - TorchConfig.cmake looks for libtorch.so in the system's library folders before its own
#   lib/, so where a system LibTorch is installed too (Debian's libtorch-dev) it would mix the
#   two: the wheel's headers with the system's libraries. Its own prefix goes first here.
# - A CUDA wheel finds the CUDA toolkit for nvcc and cudart, but its other CUDA libraries
#   (nvrtc, cuDNN, NCCL) come as PyPI packages beside it (site-packages/nvidia/...), with
#   versioned names only (libnvrtc.so.13), which CMake's find modules do not look for. The
#   cache variables those modules read are set to the wheel's own files when they are unset.
foreach(_koila_prefix IN LISTS CMAKE_PREFIX_PATH)
  if(EXISTS "${_koila_prefix}/Torch/TorchConfig.cmake")
    get_filename_component(_koila_torch_root "${_koila_prefix}/../.." ABSOLUTE)
    if(EXISTS "${_koila_torch_root}/lib")
      list(PREPEND CMAKE_PREFIX_PATH "${_koila_torch_root}")
      set(KOILA_TORCH_ROOT "${_koila_torch_root}")
    endif()
    break()
  endif()
endforeach()

if(KOILA_TORCH_ROOT)
  get_filename_component(_koila_site "${KOILA_TORCH_ROOT}/.." ABSOLUTE)
  file(GLOB _koila_cuda_lib_dirs LIST_DIRECTORIES true "${_koila_site}/nvidia/*/lib")
  # Headers of those packages (cuSPARSE, cuBLAS, NCCL, cuDNN), which LibTorch's CUDA headers
  # include and a partial CUDA toolkit may lack.
  file(GLOB KOILA_WHEEL_CUDA_INCLUDE_DIRS LIST_DIRECTORIES true "${_koila_site}/nvidia/*/include")
  # The CUDA toolkit of the machine (nvcc, cudart); the wheel's libraries fill what it lacks.
  # /usr/local/bin/nvcc may be a wrapper script, from which CMake's FindCUDA would take
  # /usr/local for the toolkit: the toolkit's own folder is named when there is one.
  if(NOT DEFINED CUDA_TOOLKIT_ROOT_DIR AND NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT})
    foreach(_koila_candidate $ENV{CUDA_HOME} /usr/local/cuda)
      if(EXISTS "${_koila_candidate}/bin/nvcc")
        set(CUDA_TOOLKIT_ROOT_DIR "${_koila_candidate}" CACHE PATH "CUDA toolkit")
        set(CMAKE_CUDA_COMPILER "${_koila_candidate}/bin/nvcc" CACHE FILEPATH "nvcc")
        break()
      endif()
    endforeach()
  endif()
  function(_koila_wheel_library var name)
    if(NOT ${var})
      foreach(_dir IN LISTS _koila_cuda_lib_dirs)
        file(GLOB _found "${_dir}/lib${name}.so.[0-9]*")
        list(FILTER _found EXCLUDE REGEX "alt\\.so")
        if(_found)
          list(SORT _found)
          list(GET _found 0 _first)
          set(${var} "${_first}" CACHE FILEPATH "lib${name} from the PyTorch wheel's CUDA packages")
          return()
        endif()
      endforeach()
    endif()
  endfunction()
  _koila_wheel_library(CUDA_nvrtc_LIBRARY nvrtc)
  _koila_wheel_library(CUDA_cublas_LIBRARY cublas)
  _koila_wheel_library(CUDA_cublasLt_LIBRARY cublasLt)
  _koila_wheel_library(CUDA_cufft_LIBRARY cufft)
  _koila_wheel_library(CUDA_curand_LIBRARY curand)
  _koila_wheel_library(CUDA_cusolver_LIBRARY cusolver)
  _koila_wheel_library(CUDA_cusparse_LIBRARY cusparse)
  _koila_wheel_library(CUDA_cuFile_LIBRARY cufile)
  _koila_wheel_library(CUDNN_LIBRARY_PATH cudnn)
  if(CUDNN_LIBRARY_PATH AND NOT CUDNN_INCLUDE_PATH)
    get_filename_component(_koila_cudnn "${CUDNN_LIBRARY_PATH}/../../include" ABSOLUTE)
    set(CUDNN_INCLUDE_PATH "${_koila_cudnn}" CACHE PATH "cuDNN headers from the PyTorch wheel")
  endif()
endif()
