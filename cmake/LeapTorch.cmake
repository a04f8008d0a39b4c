# LibTorch from the torch wheel in LEAP_PYTHON's environment, found through
# torch.utils.cmake_prefix_path. Defines the interface target `leap_torch` and helpers for the
# precompiled header and the runtime search path.
execute_process(COMMAND "${LEAP_PYTHON}" -c "import torch; print(torch.utils.cmake_prefix_path)"
                OUTPUT_VARIABLE LEAP_TORCH_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
list(APPEND CMAKE_PREFIX_PATH "${LEAP_TORCH_PREFIX}")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "")  # only used by Caffe2's nvcc flags, which we never use
endif()
if(EXISTS "${LEAP_CUDA_HOME}/bin/nvcc" AND NOT CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER "${LEAP_CUDA_HOME}/bin/nvcc")
endif()
find_package(Torch REQUIRED)

add_library(leap_torch INTERFACE)
target_link_libraries(leap_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(leap_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
set(LEAP_TORCH_LIB_DIR "${LEAP_TORCH_DIR}/lib")

# Every TU of leap_core gets the LibTorch precompiled header: loading it costs well under a second,
# parsing torch/torch.h costs ~15 s on this machine. Headers still include torch only where needed.
function(leap_torch_pch target)
  target_precompile_headers(${target} PRIVATE "${CMAKE_SOURCE_DIR}/src/util/torch_pch.hpp")
endfunction()
function(leap_torch_pch_reuse target from)
  target_precompile_headers(${target} REUSE_FROM ${from})
endfunction()
function(leap_torch_rpath target)
  set_target_properties(${target} PROPERTIES BUILD_RPATH "${LEAP_TORCH_LIB_DIR}")
endfunction()
