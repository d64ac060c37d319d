# VRAMSPILL_SANITIZE=address;undefined builds everything with those sanitizers (CI's second pass).
set(VRAMSPILL_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address;undefined")
if(VRAMSPILL_SANITIZE)
  list(JOIN VRAMSPILL_SANITIZE "," _vramspill_sanitizers)
  add_compile_options(-fsanitize=${_vramspill_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_vramspill_sanitizers})
endif()

# VRAMSPILL_FUZZ=ON builds the libFuzzer programs in tests/fuzz (tools/test.sh's fuzz pass, in
# build-fuzz/). libFuzzer comes with clang only. Everything is compiled with its coverage
# instrumentation, which guides the fuzzers; add VRAMSPILL_SANITIZE=address;undefined so that
# they also catch memory errors and undefined behaviour. Build only target vramspill_fuzzers in
# such a tree.
option(VRAMSPILL_FUZZ "Build the libFuzzer programs in tests/fuzz (clang only)" OFF)
if(VRAMSPILL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR
      "VRAMSPILL_FUZZ=ON needs clang, which provides libFuzzer (found ${CMAKE_CXX_COMPILER_ID} "
      "${CMAKE_CXX_COMPILER}). Configure a separate build directory with "
      "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang (Debian and Ubuntu: packages clang "
      "and libclang-rt-dev).")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
endif()
