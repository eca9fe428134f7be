# Decides whether the CUDA device layer is built (TANDEM_HAS_CUDA) and enables
# the CUDA language when it is. With TANDEM_CUDA=AUTO the layer is built
# whenever nvcc is found, even on a machine without a GPU, so that device code
# is always compiled and a compile error never waits for a GPU machine.
string(TOUPPER "${TANDEM_CUDA}" _tandem_cuda)
set(TANDEM_HAS_CUDA OFF)
if(NOT _tandem_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TANDEM_CUDA must be AUTO, ON or OFF (got '${TANDEM_CUDA}')")
endif()

if(NOT _tandem_cuda STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    find_program(_tandem_nvcc nvcc)
    if(NOT _tandem_nvcc)
      set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
    endif()
  endif()
  # Hopper (sm_90) unless the user chose other architectures.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TANDEM_HAS_CUDA ON)
    message(STATUS "tandem: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(_tandem_cuda STREQUAL "ON")
    message(FATAL_ERROR
      "TANDEM_CUDA=ON but no CUDA compiler was found. Install the CUDA toolkit "
      "(nvcc), put it on PATH or set CUDACXX, or configure with -DTANDEM_CUDA=AUTO|OFF.")
  else()
    message(STATUS "tandem: nvcc not found, building without the CUDA device layer (CPU only)")
  endif()
endif()
