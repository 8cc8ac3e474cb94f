# NCCL for the CUDA backend's communicator (src/kernels/cuda/nccl_communicator.cpp), shared by the main
# build (CMakeLists.txt) and the stand-alone GPU build (bench/cuda/CMakeLists.txt). Looked for in
# $NCCL_ROOT, then the CUDA toolkit (scripts/gpu_check.sh points NCCL_ROOT at PyTorch's nvidia-nccl wheel
# when the toolkit lacks it). Call after find_package(CUDAToolkit).
#
# megadlm_find_nccl() sets MEGADLM_NCCL_FOUND and, when found, MEGADLM_NCCL_INCLUDE and MEGADLM_NCCL_LIB;
# otherwise it prints one line saying the build goes on without the NCCL communicator.
function(megadlm_find_nccl)
  find_path(MEGADLM_NCCL_INCLUDE nccl.h HINTS $ENV{NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  find_library(MEGADLM_NCCL_LIB NAMES nccl libnccl.so.2 HINTS $ENV{NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}
               ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(MEGADLM_NCCL_INCLUDE AND MEGADLM_NCCL_LIB)
    set(MEGADLM_NCCL_FOUND ON PARENT_SCOPE)
  else()
    set(MEGADLM_NCCL_FOUND OFF PARENT_SCOPE)
    message(STATUS "NCCL not found: building without the NCCL communicator (set NCCL_ROOT)")
  endif()
endfunction()
