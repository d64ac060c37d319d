# What tests that run programs with libvramspill.so preloaded need to know. Included by
# tests/shim/{elf,lifecycle,bench}/CMakeLists.txt; the variables are set in each including
# directory.
#
# VRAMSPILL_TEST_SHIM       the shim's path (shim/CMakeLists.txt puts it in ${CMAKE_BINARY_DIR}/lib)
# VRAMSPILL_TEST_SIMCUDA_DIR simcuda's directory, for LD_LIBRARY_PATH
# VRAMSPILL_TEST_PRELOAD    the LD_PRELOAD value: the shim, after the ASan (or TSan) runtime in
#                           sanitizer builds (it must be the first object in the initial library
#                           list)
# VRAMSPILL_TEST_SANITIZED  1 in VRAMSPILL_SANITIZE builds, else 0 (compile definition for tests)
# VRAMSPILL_TEST_ASAN_RUNTIME the ASan runtime's path, or empty
include_guard(DIRECTORY)

set(VRAMSPILL_TEST_SHIM ${CMAKE_BINARY_DIR}/lib/libvramspill.so)
set(VRAMSPILL_TEST_SIMCUDA_DIR ${CMAKE_BINARY_DIR}/simcuda)
set(VRAMSPILL_TEST_PRELOAD ${VRAMSPILL_TEST_SHIM})
set(VRAMSPILL_TEST_SANITIZED 0)
set(VRAMSPILL_TEST_ASAN_RUNTIME "")
if(VRAMSPILL_SANITIZE)
  set(VRAMSPILL_TEST_SANITIZED 1)
  if("address" IN_LIST VRAMSPILL_SANITIZE)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _vramspill_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
    get_filename_component(_vramspill_asan "${_vramspill_asan}" REALPATH)
    if(NOT EXISTS "${_vramspill_asan}")
      message(FATAL_ERROR "cannot find the ASan runtime to preload (got '${_vramspill_asan}')")
    endif()
    set(VRAMSPILL_TEST_ASAN_RUNTIME ${_vramspill_asan})
    set(VRAMSPILL_TEST_PRELOAD "${_vramspill_asan}:${VRAMSPILL_TEST_SHIM}")
    unset(_vramspill_asan)
  elseif("thread" IN_LIST VRAMSPILL_SANITIZE)
    # The ThreadSanitizer runtime comes first as well (tests/shim/stress runs in such a build).
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libtsan.so
                    OUTPUT_VARIABLE _vramspill_tsan OUTPUT_STRIP_TRAILING_WHITESPACE)
    get_filename_component(_vramspill_tsan "${_vramspill_tsan}" REALPATH)
    if(NOT EXISTS "${_vramspill_tsan}")
      message(FATAL_ERROR "cannot find the TSan runtime to preload (got '${_vramspill_tsan}')")
    endif()
    set(VRAMSPILL_TEST_PRELOAD "${_vramspill_tsan}:${VRAMSPILL_TEST_SHIM}")
    unset(_vramspill_tsan)
  endif()
endif()

# vramspill_preload_definitions(TARGET): the paths above as compile definitions, for programs
# that start other programs with the shim preloaded.
function(vramspill_preload_definitions target)
  target_compile_definitions(${target} PRIVATE
    VRAMSPILL_TEST_SHIM="${VRAMSPILL_TEST_SHIM}"
    VRAMSPILL_TEST_SIMCUDA_DIR="${VRAMSPILL_TEST_SIMCUDA_DIR}"
    VRAMSPILL_TEST_PRELOAD="${VRAMSPILL_TEST_PRELOAD}"
    VRAMSPILL_TEST_ASAN_RUNTIME="${VRAMSPILL_TEST_ASAN_RUNTIME}"
    VRAMSPILL_TEST_SANITIZED=${VRAMSPILL_TEST_SANITIZED})
  add_dependencies(${target} vramspill simcuda)
endfunction()
