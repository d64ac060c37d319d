# Strict warnings for every target the project compiles itself.
#
# -Werror is for the project's own test and CI builds only (tools/test.sh turns it on): a user's
# or packager's plain `cmake` build with another compiler version must not stop at a warning that
# compiler added or a false positive it has (GCC 12's -Wrestrict at -O3, for one).
option(VRAMSPILL_WERROR "Treat compiler warnings as errors (the project's own test builds)" OFF)

function(vramspill_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wnon-virtual-dtor)
  if(VRAMSPILL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
