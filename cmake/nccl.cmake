# CUDA toolkit + NCCL detection for the NCCL transport.
#
# Included by the top-level CMakeLists.txt when RESHARD_WITH_NCCL is not OFF.
#   RESHARD_WITH_NCCL=AUTO  build the transport when nvcc, the CUDA runtime and NCCL
#                           are all found; otherwise leave the CPU build as it is.
#   RESHARD_WITH_NCCL=ON    the same, but a missing piece is a configure error.
# Sets RESHARD_HAVE_NCCL (ON/OFF) and defines reshard_add_nccl(target).
#
# Knobs (cache variables, all optional):
#   RESHARD_CUDA_ARCHITECTURES  CUDA architectures of the copy kernels (default 90 = H100/H200;
#                               e.g. "90;100" for GB200 too, or "native").
#   RESHARD_CUDA_ROOT           toolkit prefix when not /usr/local/cuda and nvcc is not in PATH.
#   RESHARD_NCCL_ROOT           NCCL prefix (also the NCCL_ROOT / NCCL_HOME environment
#                               variables); default: inside the CUDA toolkit.
# CUDA is enabled as a language only when everything was found, so a machine without CUDA
# configures exactly like the CPU-only build.

set(RESHARD_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA architectures of the NCCL transport kernels")
set(RESHARD_CUDA_ROOT "" CACHE PATH "CUDA toolkit prefix (default: nvcc in PATH, then /usr/local/cuda)")
set(RESHARD_NCCL_ROOT "" CACHE PATH "NCCL install prefix (default: NCCL_ROOT/NCCL_HOME env, the CUDA toolkit)")

set(RESHARD_HAVE_NCCL OFF)
set(_rs_nccl_missing "")

# --- 1. the CUDA toolkit (nvcc + cudart) ---------------------------------------------------------
if(RESHARD_CUDA_ROOT AND NOT CUDAToolkit_ROOT)
  set(CUDAToolkit_ROOT "${RESHARD_CUDA_ROOT}")
endif()
if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  find_program(_rs_nvcc_in_path nvcc)
  if(NOT _rs_nvcc_in_path)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart OR NOT CUDAToolkit_NVCC_EXECUTABLE)
  string(APPEND _rs_nccl_missing " CUDA toolkit (nvcc + cudart; set RESHARD_CUDA_ROOT)")
endif()

# --- 2. NCCL ------------------------------------------------------------------------------------------
if(CUDAToolkit_FOUND)
  set(_rs_nccl_hints ${RESHARD_NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT}
                     ${CUDAToolkit_TARGET_DIR})
  find_path(RESHARD_NCCL_INCLUDE_DIR nccl.h HINTS ${_rs_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(RESHARD_NCCL_LIBRARY nccl HINTS ${_rs_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(RESHARD_NCCL_INCLUDE_DIR AND RESHARD_NCCL_LIBRARY)
    file(STRINGS "${RESHARD_NCCL_INCLUDE_DIR}/nccl.h" _rs_nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" _rs_nccl_major "${_rs_nccl_ver}")
    string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" _rs_nccl_minor "${_rs_nccl_ver}")
    string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" _rs_nccl_patch "${_rs_nccl_ver}")
    set(RESHARD_NCCL_VERSION "${_rs_nccl_major}.${_rs_nccl_minor}.${_rs_nccl_patch}")
    # Nonblocking communicators (ncclCommInitRankConfig, ncclInProgress) need 2.14; we ask 2.18.
    if(RESHARD_NCCL_VERSION VERSION_LESS 2.18)
      string(APPEND _rs_nccl_missing " NCCL >= 2.18 (found ${RESHARD_NCCL_VERSION})")
    endif()
  else()
    string(APPEND _rs_nccl_missing " NCCL (nccl.h + libnccl; set RESHARD_NCCL_ROOT)")
  endif()
endif()

# --- 3. the CUDA language, only when everything is there ----------------------------------------
if(_rs_nccl_missing STREQUAL "")
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${RESHARD_CUDA_ARCHITECTURES})
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(RESHARD_HAVE_NCCL ON)
  else()
    string(APPEND _rs_nccl_missing " a working CUDA compiler")
  endif()
endif()

if(NOT RESHARD_HAVE_NCCL)
  if(RESHARD_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "RESHARD_WITH_NCCL=ON but not found:${_rs_nccl_missing}")
  endif()
  message(STATUS "reshard: NCCL transport not built; missing:${_rs_nccl_missing}")
  return()
endif()

if(NOT TARGET reshard::nccl)
  add_library(reshard::nccl UNKNOWN IMPORTED)
  set_target_properties(reshard::nccl PROPERTIES IMPORTED_LOCATION "${RESHARD_NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${RESHARD_NCCL_INCLUDE_DIR}")
endif()
message(STATUS "reshard: CUDA ${CUDAToolkit_VERSION}, NCCL ${RESHARD_NCCL_VERSION} "
               "(${RESHARD_NCCL_LIBRARY}), kernels for sm ${RESHARD_CUDA_ARCHITECTURES}")

# Options for nvcc: the top-level add_compile_options() are C-compiler warnings that nvcc
# rejects, so CUDA targets get their own set (host side through -Xcompiler).
set(RESHARD_CUDA_OPTIONS -Xcompiler=-Wall,-Wextra,-Wshadow,-Wundef)

# Compile the .cu files of src/transport/nccl into an object library with nvcc-safe flags.
function(reshard_nccl_cuda_objects name)
  add_library(${name} OBJECT ${ARGN})
  # Drop the directory-level C warning flags inherited at creation (see above).
  set_property(TARGET ${name} PROPERTY COMPILE_OPTIONS "")
  target_compile_options(${name} PRIVATE ${RESHARD_CUDA_OPTIONS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include
                                             ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE CUDA::cudart)
  set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "${RESHARD_CUDA_ARCHITECTURES}"
                        CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
endfunction()

# Add the NCCL transport's C files to the object library @objects (with the CUDA and NCCL
# headers) and build its kernels; RESHARD_KERNEL_OBJECTS (in the caller's scope) receives
# the kernels' objects, to be added to each library made from @objects. The libraries link
# CUDA::cudart, reshard::nccl and stdc++ themselves (see the top-level CMakeLists.txt).
function(reshard_add_nccl objects)
  file(GLOB _rs_nccl_c CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/transport/nccl/*.c)
  file(GLOB _rs_nccl_cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/transport/nccl/*.cu)
  reshard_nccl_cuda_objects(reshard_nccl_kernels ${_rs_nccl_cu})
  target_sources(${objects} PRIVATE ${_rs_nccl_c})
  target_link_libraries(${objects} PRIVATE CUDA::cudart reshard::nccl)
  target_compile_definitions(${objects} PUBLIC RESHARD_HAVE_NCCL=1)
  set(RESHARD_KERNEL_OBJECTS $<TARGET_OBJECTS:reshard_nccl_kernels> PARENT_SCOPE)
endfunction()
