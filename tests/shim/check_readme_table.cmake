# cmake -DDOC_TOOL=vramspill_options_doc -DREADME=README.md -P check_readme_table.cmake
# Fails unless the README holds the generated options table exactly: same header, same rows, no
# stale extra row (the table is the run of '|' lines that starts at the generated header).
execute_process(COMMAND ${DOC_TOOL} OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${DOC_TOOL} failed (${rc})")
endif()
file(READ ${README} readme)
string(REGEX MATCH "^[^\n]*\n" header "${generated}")
string(FIND "${readme}" "${header}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md has no options table (header: ${header}). "
                      "Paste the output of vramspill_options_doc into its Configuration section.")
endif()
string(SUBSTRING "${readme}" ${at} -1 rest)
string(REGEX MATCH "^(\\|[^\n]*\n)+" table "${rest}")
if(NOT table STREQUAL generated)
  message(FATAL_ERROR "README.md's options table is stale. README has:\n${table}\n"
                      "vramspill_options_doc prints:\n${generated}\n"
                      "Replace the README's table with the second.")
endif()
