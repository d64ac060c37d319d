# cmake -DSOURCE_DIR=<repository root> -P check_architecture.cmake
# Keeps shim/README.md true (it is the single source of truth for the layer order):
# - no file under shim/, policies/, tools/, tests/ or cmake/ cites the design notes outside the
#   repository, which people who clone it cannot read: cite shim/README.md or a Note instead;
# - every folder under shim/ is in the page's `include-order:` line, and a source file under
#   shim/<folder>/ includes "<other>/..." only for an <other> at or before <folder> in that line,
#   unless the page lists the pair as an `include-exception:`;
# - nothing under policies/ includes a shim/ folder.
# Folders the line names but the tree does not have yet are fine.
cmake_minimum_required(VERSION 3.25)  # if(IN_LIST)
if(NOT IS_DIRECTORY "${SOURCE_DIR}/shim")
  message(FATAL_ERROR "SOURCE_DIR='${SOURCE_DIR}' is not the repository root (no shim/ in it)")
endif()
set(problems "")

# Built from two parts, so that this file does not name what it looks for.
set(outside_notes "DESIGN")
string(APPEND outside_notes "(\\.md| section|$)")
foreach(top shim policies tools tests cmake)
  if(NOT IS_DIRECTORY "${SOURCE_DIR}/${top}")
    continue()
  endif()
  file(GLOB_RECURSE files LIST_DIRECTORIES false RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/${top}/*")
  foreach(file IN LISTS files)
    if(file MATCHES "(^|/)build[^/]*/")
      continue()
    endif()
    file(STRINGS "${SOURCE_DIR}/${file}" cited REGEX "${outside_notes}")
    if(cited)
      list(GET cited 0 first)
      string(STRIP "${first}" first)
      string(APPEND problems "${file} cites the design notes outside the repository "
                             "(\"${first}\"): cite shim/README.md or a Note instead\n")
    endif()
    # A citation of the page is its path, a comma and one of its headings in double quotes,
    # possibly wrapped over comment lines.
    file(STRINGS "${SOURCE_DIR}/${file}" cites_page REGEX "shim/README\\.md")
    if(cites_page)
      file(READ "${SOURCE_DIR}/${file}" text)
      string(REGEX REPLACE "\n[ \t]*(//|#)[ \t]*" " " text "${text}")
      string(REGEX MATCHALL "shim/README\\.md, \"[^\"]+\"" citations "${text}")
      list(APPEND page_citations ${citations})
      foreach(citation IN LISTS citations)
        list(APPEND citing_files "${file}")
      endforeach()
    endif()
  endforeach()
endforeach()

file(STRINGS "${SOURCE_DIR}/shim/README.md" headings REGEX "^##+ ")
list(TRANSFORM headings REPLACE "^##+ +" "")
list(LENGTH page_citations cited_count)
if(cited_count GREATER 0)
  math(EXPR last "${cited_count} - 1")
  foreach(index RANGE ${last})
    list(GET page_citations ${index} citation)
    list(GET citing_files ${index} file)
    string(REGEX REPLACE ".*\"([^\"]+)\"" "\\1" heading "${citation}")
    if(NOT heading IN_LIST headings)
      string(APPEND problems "${file} cites shim/README.md, \"${heading}\", which is not one of "
                             "its headings\n")
    endif()
  endforeach()
endif()

file(STRINGS "${SOURCE_DIR}/shim/README.md" order_line REGEX "include-order:")
list(LENGTH order_line order_lines)
if(NOT order_lines EQUAL 1)
  message(FATAL_ERROR "shim/README.md must have exactly one `include-order:` line "
                      "(it has ${order_lines})")
endif()
string(REGEX REPLACE ".*include-order:([a-z_ ]*).*" "\\1" order "${order_line}")
string(STRIP "${order}" order)
string(REGEX REPLACE " +" ";" order "${order}")
string(REPLACE ";" " " order_text "${order}")
file(STRINGS "${SOURCE_DIR}/shim/README.md" exception_lines REGEX "include-exception:")
set(exceptions "")
foreach(line IN LISTS exception_lines)
  string(REGEX REPLACE ".*include-exception: *([^ `]+) *-> *([^ `]+).*" "\\1 -> \\2" pair "${line}")
  list(APPEND exceptions "${pair}")
endforeach()

file(GLOB folders LIST_DIRECTORIES true RELATIVE "${SOURCE_DIR}/shim" "${SOURCE_DIR}/shim/*")
foreach(folder IN LISTS folders)
  if(NOT IS_DIRECTORY "${SOURCE_DIR}/shim/${folder}")
    continue()
  endif()
  list(FIND order "${folder}" level)
  if(level EQUAL -1)
    string(APPEND problems "shim/${folder}/ is not in shim/README.md's include-order line "
                           "(${order_text}): say where it sits\n")
    continue()
  endif()
  file(GLOB_RECURSE sources LIST_DIRECTORIES false RELATIVE "${SOURCE_DIR}/shim"
       "${SOURCE_DIR}/shim/${folder}/*.h" "${SOURCE_DIR}/shim/${folder}/*.cpp"
       "${SOURCE_DIR}/shim/${folder}/*.c" "${SOURCE_DIR}/shim/${folder}/*.S")
  foreach(source IN LISTS sources)
    file(STRINGS "${SOURCE_DIR}/shim/${source}" includes
         REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/")
    foreach(include IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"(([a-z_]+)/[^\"]*)\".*" "\\1" path
             "${include}")
      string(REGEX REPLACE "/.*" "" target "${path}")
      list(FIND order "${target}" target_level)
      if(target_level GREATER level AND NOT "${source} -> ${path}" IN_LIST exceptions)
        string(APPEND problems "shim/${source} includes \"${path}\", but ${target}/ is above "
                               "${folder}/ in shim/README.md's include order (${order_text})\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(IS_DIRECTORY "${SOURCE_DIR}/policies")
  file(GLOB_RECURSE sources LIST_DIRECTORIES false RELATIVE "${SOURCE_DIR}"
       "${SOURCE_DIR}/policies/*.h" "${SOURCE_DIR}/policies/*.cpp")
  foreach(source IN LISTS sources)
    file(STRINGS "${SOURCE_DIR}/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/")
    foreach(include IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([a-z_]+)/.*" "\\1" target "${include}")
      if(target IN_LIST order)
        string(STRIP "${include}" include)
        string(APPEND problems "${source}: ${include}: policies/ includes nothing from shim/\n")
      endif()
    endforeach()
  endforeach()
endif()

if(NOT problems STREQUAL "")
  message(FATAL_ERROR "shim/README.md and the tree disagree:\n${problems}")
endif()
