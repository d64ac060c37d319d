# Every third-party piece comes from a Debian package (tools/install-deps.sh installs them), except the
# CUDA toolkit (NVIDIA's packages; tools/install-deps.sh checks for it).
#
# Note [Preload-safe dependency targets]
# Whatever libvramspill.so has as DT_NEEDED is loaded into every process that inherits LD_PRELOAD
# (shim/README.md, "What a preloaded library may link"). The Debian packages' own CMake targets link
# shared libraries: toml++'s target links libtomlplusplus.so, spdlog's header-only target still
# links libfmt.so, mimalloc's libmimalloc.so replaces malloc process-wide and libunwind.so.8
# replaces the C++ unwinder. So the preloaded library links only the vramspill::* targets below,
# which carry headers and compile definitions and no libraries; mimalloc and libunwind are
# dlopen()ed by the SONAME their header target defines. Tests, benchmarks and tools may link the
# packages' own targets.

# --- CUDA toolkit ------------------------------------------------------------------------------
# The shim uses the driver API headers only (vramspill::cuda_headers; it must never link libcuda).
# Test and demo programs link the toolkit's stub libcuda.so (CUDA::cuda_driver) like any CUDA
# application and find simcuda's libcuda.so.1 at run time. nvcc is optional (tests/cudart).
# CUDA_HOME (the common convention) counts as CUDAToolkit_ROOT when that is not set.
if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND DEFINED ENV{CUDA_HOME})
  set(CUDAToolkit_ROOT "$ENV{CUDA_HOME}")
endif()
find_package(CUDAToolkit)
if(CUDAToolkit_FOUND)
  find_path(VRAMSPILL_CUDA_INCLUDE_DIR NAMES cudaTypedefs.h HINTS ${CUDAToolkit_INCLUDE_DIRS}
            NO_DEFAULT_PATH DOC "Directory holding the CUDA driver API headers")
endif()
if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cuda_driver OR NOT VRAMSPILL_CUDA_INCLUDE_DIR)
  message(FATAL_ERROR
    "The NVIDIA CUDA toolkit was not found or is incomplete (needed: cuda.h, cudaTypedefs.h and "
    "the stub libcuda.so; found: CUDAToolkit_FOUND=${CUDAToolkit_FOUND}, include dir "
    "'${CUDAToolkit_INCLUDE_DIRS}'). Install it (NVIDIA's apt repository: cuda-toolkit-13-0; the "
    "distributions' nvidia-cuda-toolkit is too old) and point the build at it with -DCUDAToolkit_ROOT=/path/to/cuda "
    "or CUDA_HOME; tools/install-deps.sh explains the options.")
endif()
# The shim hooks entry points that only CUDA 13.0's headers declare (shim/driver/undeclared_exports.h);
# older headers would fail deep in the build. Keep in step with MIN_CUDA_VERSION in
# tools/install-deps.sh.
file(STRINGS "${VRAMSPILL_CUDA_INCLUDE_DIR}/cuda.h" vramspill_cuda_version_line
     REGEX "^#define CUDA_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+$" vramspill_cuda_version "${vramspill_cuda_version_line}")
if(NOT vramspill_cuda_version OR vramspill_cuda_version LESS 13000)
  message(FATAL_ERROR
    "The CUDA headers in ${VRAMSPILL_CUDA_INCLUDE_DIR} are older than CUDA 13.0 (CUDA_VERSION "
    "'${vramspill_cuda_version}'), which the build needs. Install cuda-toolkit-13-0 from NVIDIA's "
    "apt repository and point the build at it with -DCUDAToolkit_ROOT=/path/to/cuda or CUDA_HOME; "
    "tools/install-deps.sh explains the options.")
endif()
message(STATUS "CUDA ${CUDAToolkit_VERSION}: headers ${VRAMSPILL_CUDA_INCLUDE_DIR}, "
               "driver stub ${CUDA_cuda_driver_LIBRARY}")
add_library(vramspill::cuda_headers INTERFACE IMPORTED)
target_include_directories(vramspill::cuda_headers SYSTEM INTERFACE ${VRAMSPILL_CUDA_INCLUDE_DIR})

find_package(Python3 REQUIRED COMPONENTS Interpreter)   # code generators
find_package(Threads REQUIRED)

# --- Packages, with the targets each provides ---------------------------------------------------
find_package(GTest REQUIRED)          # GTest::gtest GTest::gtest_main GTest::gmock GTest::gmock_main
find_package(benchmark REQUIRED)      # benchmark::benchmark benchmark::benchmark_main
find_package(CLI11 CONFIG REQUIRED)   # CLI11::CLI11 (header-only)
find_package(tomlplusplus REQUIRED)   # tomlplusplus::tomlplusplus (links libtomlplusplus.so)
find_package(fmt REQUIRED)            # fmt::fmt (libfmt.so) fmt::fmt-header-only
find_package(spdlog REQUIRED)         # spdlog::spdlog (libspdlog.so) spdlog::spdlog_header_only
find_package(mimalloc REQUIRED)       # mimalloc (libmimalloc.so: overrides malloc when linked)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBUNWIND REQUIRED IMPORTED_TARGET libunwind)   # PkgConfig::LIBUNWIND
# Debian's cpp-httplib ships a pkg-config file and no CMake package; only the program
# vramspill-exporter links it (Note [The exporter is a program of its own] in
# tools/cli/exporter_launcher.h).
pkg_check_modules(CPPHTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)   # PkgConfig::CPPHTTPLIB

# --- Preload-safe targets (Note [Preload-safe dependency targets]) ------------------------------

# Sets OUT to the SONAME recorded in the shared library LIB (the name to dlopen).
function(_vramspill_soname out lib)
  get_filename_component(lib "${lib}" REALPATH)
  execute_process(COMMAND ${CMAKE_OBJDUMP} -p "${lib}" OUTPUT_VARIABLE dump RESULT_VARIABLE rc
                  ERROR_QUIET)
  if(NOT rc EQUAL 0 OR NOT dump MATCHES "SONAME +([^\n ]+)")
    message(FATAL_ERROR "cannot read the SONAME of ${lib} (objdump: ${CMAKE_OBJDUMP})")
  endif()
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

get_target_property(_vramspill_inc tomlplusplus::tomlplusplus INTERFACE_INCLUDE_DIRECTORIES)
add_library(vramspill::toml_header_only INTERFACE IMPORTED)
target_include_directories(vramspill::toml_header_only SYSTEM INTERFACE ${_vramspill_inc})
target_compile_definitions(vramspill::toml_header_only INTERFACE TOML_HEADER_ONLY=1)

# Debian's spdlog is built against the packaged fmt (SPDLOG_FMT_EXTERNAL).
get_target_property(_vramspill_inc spdlog::spdlog_header_only INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(_vramspill_defs spdlog::spdlog_header_only INTERFACE_COMPILE_DEFINITIONS)
add_library(vramspill::spdlog_header_only INTERFACE IMPORTED)
target_include_directories(vramspill::spdlog_header_only SYSTEM INTERFACE ${_vramspill_inc})
if(_vramspill_defs)
  target_compile_definitions(vramspill::spdlog_header_only INTERFACE ${_vramspill_defs})
endif()
target_link_libraries(vramspill::spdlog_header_only INTERFACE fmt::fmt-header-only Threads::Threads)

get_target_property(_vramspill_inc mimalloc INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(_vramspill_lib mimalloc LOCATION)
_vramspill_soname(VRAMSPILL_MIMALLOC_SONAME "${_vramspill_lib}")
add_library(vramspill::mimalloc_headers INTERFACE IMPORTED)
target_include_directories(vramspill::mimalloc_headers SYSTEM INTERFACE ${_vramspill_inc})
target_compile_definitions(vramspill::mimalloc_headers INTERFACE
  VRAMSPILL_MIMALLOC_SONAME="${VRAMSPILL_MIMALLOC_SONAME}")

find_library(VRAMSPILL_LIBUNWIND_LIBRARY NAMES unwind HINTS ${LIBUNWIND_LIBRARY_DIRS})
_vramspill_soname(VRAMSPILL_LIBUNWIND_SONAME "${VRAMSPILL_LIBUNWIND_LIBRARY}")
add_library(vramspill::libunwind_headers INTERFACE IMPORTED)
target_include_directories(vramspill::libunwind_headers SYSTEM INTERFACE ${LIBUNWIND_INCLUDE_DIRS})
target_compile_definitions(vramspill::libunwind_headers INTERFACE
  VRAMSPILL_LIBUNWIND_SONAME="${VRAMSPILL_LIBUNWIND_SONAME}")

unset(_vramspill_inc)
unset(_vramspill_defs)
unset(_vramspill_lib)
