# VRAMSPILL_SANITIZE=address;undefined builds everything with those sanitizers (CI's second pass).
#
# Note [Sanitizer builds compile at -O1 -g1]
# A RelWithDebInfo sanitizer tree (tools/test.sh's ASan+UBSan, TSan and fuzz trees) compiles at
# -O1 -g1 instead of -O2 -g: the sanitizers' documented setting, whose stack traces keep file and
# line (-g1 keeps the line tables and drops the variables). Compiling is most of CI's time on a
# 2-core machine, and this halves it or better (gcc 12, ASan+UBSan, CPU seconds for a hook file /
# a simcuda test: 22 / 23 at -O2 -g, 12 / 8 at -O1 -g1; -O2 -g1 21 / 15 and -O1 -g 17 / 11, so
# it takes both). The options come after CMAKE_<LANG>_FLAGS_RELWITHDEBINFO on the command line,
# so they win; -DNDEBUG stays. Other build types are left alone (Debug stays -O0 -g).
# Measured and not done: a precompiled <gtest/gtest.h> saves under 10% of a test file at -O1
# (code generation costs, not parsing) for an 88 MB header per tree, which ccache skips unless
# configured to; unity builds merge little (most test programs are one file); and ctest -j2
# already keeps both cores busy in the ASan pass, so more jobs would not finish sooner.
set(VRAMSPILL_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address;undefined")
if(VRAMSPILL_SANITIZE)
  list(JOIN VRAMSPILL_SANITIZE "," _vramspill_sanitizers)
  add_compile_options(-fsanitize=${_vramspill_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<CONFIG:RelWithDebInfo>:-O1;-g1>")
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
