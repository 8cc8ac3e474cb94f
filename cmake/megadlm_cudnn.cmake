# cuDNN's fused attention for the CUDA backend (src/kernels/cuda/attention_cudnn.cpp), shared by the main
# build (CMakeLists.txt) and the stand-alone GPU build (bench/cuda/CMakeLists.txt). It needs:
#   - the cuDNN frontend headers (cudnn_frontend.h: header-only C++ graph API, a build dependency, never
#     copied into the repository): -DCUDNN_FRONTEND_INCLUDE=... or env CUDNN_FRONTEND_INCLUDE,
#     <repo>/build-gpu-deps/cudnn_frontend/include (scripts/get_cudnn_frontend.sh puts them there), or the
#     include/ folder that pip's `nvidia-cudnn-frontend` wheel installs next to its `cudnn` package;
#   - cudnn.h and libcudnn 9 from one installation: -DCUDNN_ROOT=... or env CUDNN_ROOT, the CUDA toolkit,
#     or the nvidia-cudnn wheel that PyTorch depends on (nvidia/cudnn/{include,lib}).
#
# megadlm_find_cudnn(<repo root>) sets MEGADLM_CUDNN_FOUND and, when found, MEGADLM_CUDNN_FRONTEND_INCLUDE,
# MEGADLM_CUDNN_INCLUDE and MEGADLM_CUDNN_LIB, and prints one line saying what it found or what is missing.
# megadlm_use_cudnn(<target> <link scope> <kernels/cuda dir>) compiles attention_cudnn.cpp against them,
# defines MEGADLM_HAVE_CUDNN_FRONTEND on it and on attention.cu (the dispatch), and links libcudnn and NVRTC.
# Call it from the directory that creates <target>.

# Where Python's packages put cuDNN: prints the frontend's include/ and the nvidia-cudnn wheel's root.
# find_spec locates the packages without importing them (the frontend's module loads libcudnn).
set(_MEGADLM_CUDNN_PY [=[
import importlib.util, os
def where(name):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return ''
    if spec is None:
        return ''
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.dirname(spec.origin or '')
fe = where('cudnn')
print(os.path.join(os.path.dirname(fe), 'include') if fe else '')
print(where('nvidia.cudnn'))
]=])

function(megadlm_find_cudnn repo_root)
  set(CUDNN_FRONTEND_INCLUDE "$ENV{CUDNN_FRONTEND_INCLUDE}" CACHE PATH "cuDNN frontend headers (cudnn_frontend.h)")
  set(CUDNN_ROOT "$ENV{CUDNN_ROOT}" CACHE PATH "cuDNN installation (include/cudnn.h, lib/libcudnn.so*)")
  set(py_fe "")
  set(py_cudnn "")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "${_MEGADLM_CUDNN_PY}" OUTPUT_VARIABLE py_out ERROR_QUIET
                    RESULT_VARIABLE py_rc)
    if(py_rc EQUAL 0)
      string(REPLACE "\n" ";" py_lines "${py_out}")
      list(LENGTH py_lines n)
      if(n GREATER_EQUAL 2)
        list(GET py_lines 0 py_fe)
        list(GET py_lines 1 py_cudnn)
      endif()
    endif()
  endif()

  find_path(MEGADLM_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
            HINTS ${CUDNN_FRONTEND_INCLUDE} ${repo_root}/build-gpu-deps/cudnn_frontend/include ${py_fe})
  # The toolkit's cuDNN first, then the wheel's; the library is looked up next to the header found.
  find_path(MEGADLM_CUDNN_INCLUDE cudnn.h HINTS ${CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} ${py_cudnn}/include)
  set(lib_hints)
  if(MEGADLM_CUDNN_INCLUDE)
    get_filename_component(cudnn_root ${MEGADLM_CUDNN_INCLUDE} DIRECTORY)
    set(lib_hints ${cudnn_root}/lib64 ${cudnn_root}/lib)
  endif()
  find_library(MEGADLM_CUDNN_LIB NAMES cudnn libcudnn.so.9
               HINTS ${lib_hints} ${CUDNN_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} ${py_cudnn}/lib)

  set(missing)
  if(NOT MEGADLM_CUDNN_FRONTEND_INCLUDE)
    list(APPEND missing "the cuDNN frontend headers (run scripts/get_cudnn_frontend.sh or set CUDNN_FRONTEND_INCLUDE)")
  endif()
  if(NOT MEGADLM_CUDNN_INCLUDE OR NOT MEGADLM_CUDNN_LIB)
    list(APPEND missing "cudnn.h + libcudnn (set CUDNN_ROOT)")
  else()
    file(STRINGS ${MEGADLM_CUDNN_INCLUDE}/cudnn_version.h major REGEX "^#define CUDNN_MAJOR [0-9]+")
    file(STRINGS ${MEGADLM_CUDNN_INCLUDE}/cudnn_version.h minor REGEX "^#define CUDNN_MINOR [0-9]+")
    string(REGEX MATCH "[0-9]+" major "${major}")
    string(REGEX MATCH "[0-9]+" minor "${minor}")
    if(major AND major LESS 9)
      list(APPEND missing "cuDNN 9 (found cuDNN ${major} in ${MEGADLM_CUDNN_INCLUDE})")
    endif()
  endif()
  if(NOT TARGET CUDA::nvrtc)  # find_package(CUDAToolkit) defines it when the toolkit has NVRTC
    list(APPEND missing "NVRTC (CUDA::nvrtc, part of the CUDA toolkit)")
  endif()
  if(missing)
    string(JOIN " and " what ${missing})
    message(STATUS "cuDNN fused attention: not built (AttentionImpl::Cudnn unavailable): missing ${what}")
    set(MEGADLM_CUDNN_FOUND OFF PARENT_SCOPE)
    return()
  endif()
  file(STRINGS ${MEGADLM_CUDNN_FRONTEND_INCLUDE}/cudnn_frontend_version.h fe_ver
       REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION")
  string(REGEX REPLACE "[^;]*VERSION ([0-9]+)" "\\1" fe_ver "${fe_ver}")
  string(JOIN "." fe_ver ${fe_ver})
  message(STATUS "cuDNN fused attention: frontend ${fe_ver} (${MEGADLM_CUDNN_FRONTEND_INCLUDE}), "
                 "cuDNN ${major}.${minor} (${MEGADLM_CUDNN_LIB})")
  set(MEGADLM_CUDNN_FOUND ON PARENT_SCOPE)
endfunction()

function(megadlm_use_cudnn target scope kernels_dir)
  # -isystem: the frontend's headers are not held to the project's -Wall -Wextra.
  set_property(SOURCE ${kernels_dir}/attention_cudnn.cpp APPEND PROPERTY COMPILE_OPTIONS
               -isystem${MEGADLM_CUDNN_FRONTEND_INCLUDE} -isystem${MEGADLM_CUDNN_INCLUDE})
  set_property(SOURCE ${kernels_dir}/attention_cudnn.cpp ${kernels_dir}/attention.cu APPEND PROPERTY
               COMPILE_DEFINITIONS MEGADLM_HAVE_CUDNN_FRONTEND=1)
  # NVRTC: the frontend compiles some of its own engines at run time (none of them is an SDPA one, but the
  # graph code references them); it is part of the CUDA toolkit.
  target_link_libraries(${target} ${scope} ${MEGADLM_CUDNN_LIB} CUDA::nvrtc)
endfunction()
