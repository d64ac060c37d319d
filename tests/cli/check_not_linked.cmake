# cmake -DREADELF=readelf -DPROGRAM=<file> -DLIBRARY=<regex> -P check_not_linked.cmake
# Fails when one of PROGRAM's NEEDED entries (the shared libraries the loader must find for it to
# start at all) matches LIBRARY: `vramspill` must start where only it and the shim were copied
# (Note [The exporter is a program of its own] in tools/cli/exporter_launcher.h).
execute_process(COMMAND ${READELF} -d ${PROGRAM} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${PROGRAM} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]*\\]" needed "${dynamic}")
if(NOT needed)
  message(FATAL_ERROR "${READELF} -d ${PROGRAM} shows no NEEDED entries: not a dynamic program?")
endif()
foreach(entry IN LISTS needed)
  string(REGEX REPLACE ".*\\[(.*)\\]" "\\1" library "${entry}")
  if(library MATCHES "${LIBRARY}")
    message(FATAL_ERROR "${PROGRAM} needs ${library}, which it must not load")
  endif()
endforeach()
