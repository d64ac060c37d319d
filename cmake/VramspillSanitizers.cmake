# VRAMSPILL_SANITIZE=address;undefined builds everything with those sanitizers (CI's second pass).
set(VRAMSPILL_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address;undefined")
if(VRAMSPILL_SANITIZE)
  list(JOIN VRAMSPILL_SANITIZE "," _vramspill_sanitizers)
  add_compile_options(-fsanitize=${_vramspill_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_vramspill_sanitizers})
endif()
