# NCCL's ABI on collie (src/capi/nccl/): detection and the option, included from the top-level CMakeLists.txt.
#
# libnccl.so.2 is compiled against the CUDA toolkit's own nccl.h (never a copy in this repository), so that its
# struct sizes, enum values and signatures are NCCL's by construction. nccl.h includes cuda_runtime.h, so both
# headers must be found; nothing of CUDA is linked. COLLIE_WITH_NCCL_ABI defaults to ON when they are.
#
# Sets COLLIE_NCCL_INCLUDE_DIR (nccl.h), COLLIE_NCCL_CUDART_INCLUDE_DIR (cuda_runtime.h) and, when nccl.h is found,
# COLLIE_NCCL_HEADER_VERSION (major.minor.patch read from the header).
set(_collie_nccl_hints)
if(NOT CUDAToolkit_FOUND)
  find_package(CUDAToolkit QUIET)
endif()
if(CUDAToolkit_INCLUDE_DIRS)
  list(APPEND _collie_nccl_hints ${CUDAToolkit_INCLUDE_DIRS})
endif()
if(DEFINED ENV{CUDA_HOME})
  list(APPEND _collie_nccl_hints $ENV{CUDA_HOME}/include)
endif()
list(APPEND _collie_nccl_hints /usr/local/cuda/include)
find_path(COLLIE_NCCL_INCLUDE_DIR nccl.h HINTS ${_collie_nccl_hints} DOC "Directory of NCCL's nccl.h")
find_path(COLLIE_NCCL_CUDART_INCLUDE_DIR cuda_runtime.h HINTS ${_collie_nccl_hints}
  DOC "Directory of cuda_runtime.h (nccl.h includes it)")

set(COLLIE_NCCL_HEADER_VERSION "")
if(COLLIE_NCCL_INCLUDE_DIR)
  file(STRINGS ${COLLIE_NCCL_INCLUDE_DIR}/nccl.h _collie_nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "#define NCCL_${_part} +([0-9]+)" _m "${_collie_nccl_defs}")
    set(_collie_nccl_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT _collie_nccl_MAJOR STREQUAL "" AND NOT _collie_nccl_MINOR STREQUAL "" AND NOT _collie_nccl_PATCH STREQUAL "")
    set(COLLIE_NCCL_HEADER_VERSION "${_collie_nccl_MAJOR}.${_collie_nccl_MINOR}.${_collie_nccl_PATCH}")
  endif()
endif()

set(_collie_nccl_default OFF)
if(COLLIE_NCCL_INCLUDE_DIR AND COLLIE_NCCL_CUDART_INCLUDE_DIR AND COLLIE_NCCL_HEADER_VERSION)
  set(_collie_nccl_default ON)
endif()
option(COLLIE_WITH_NCCL_ABI "Build libnccl.so.2: NCCL's C API on collie (needs the CUDA toolkit's nccl.h)"
  ${_collie_nccl_default})
if(COLLIE_WITH_NCCL_ABI)
  if(NOT COLLIE_NCCL_INCLUDE_DIR OR NOT COLLIE_NCCL_CUDART_INCLUDE_DIR OR NOT COLLIE_NCCL_HEADER_VERSION)
    message(FATAL_ERROR "COLLIE_WITH_NCCL_ABI=ON but nccl.h (with NCCL_MAJOR/MINOR/PATCH) and cuda_runtime.h were "
                        "not both found: set COLLIE_NCCL_INCLUDE_DIR and COLLIE_NCCL_CUDART_INCLUDE_DIR")
  endif()
  if(NOT _collie_nccl_MAJOR EQUAL 2)
    message(FATAL_ERROR "COLLIE_WITH_NCCL_ABI: ${COLLIE_NCCL_INCLUDE_DIR}/nccl.h is NCCL ${COLLIE_NCCL_HEADER_VERSION}; "
                        "only NCCL 2.x headers are supported")
  endif()
  message(STATUS "NCCL ABI (libnccl.so.2): nccl.h ${COLLIE_NCCL_HEADER_VERSION} from ${COLLIE_NCCL_INCLUDE_DIR}")
endif()
