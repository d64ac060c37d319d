# cmake -DNM=nm -DLIBRARIES="a.a;b.a" -P check_no_global_constructors.cmake
# GCC names a translation unit's dynamic-initialisation function _GLOBAL__sub_I_<file>; any
# such symbol is code that would run when the shim is loaded.
foreach(library IN LISTS LIBRARIES)
  execute_process(COMMAND ${NM} ${library} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${library} failed (${rc})")
  endif()
  string(REGEX MATCHALL "_GLOBAL__sub_I_[A-Za-z0-9_.]*" constructors "${symbols}")
  if(constructors)
    message(FATAL_ERROR "${library} has global constructors: ${constructors}")
  endif()
endforeach()
