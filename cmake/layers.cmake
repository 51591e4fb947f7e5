# Layer include roots. Each layer compiles against a folder that links only the layers it may
# use, so `#include "modules/x.h"` from runtime/ is a compile error, not a convention.
# data/ comes after modules so that no lower layer sees it; it itself sees only runtime (USES).
set(OCTET_LAYERS runtime kernels autograd modules data train tools)

# octet_layer_include_root(<layer> <out_var> [<uses>...]): the include root holding <layer> and
# every layer before it, or only the layers named in <uses> when there are any.
function(octet_layer_include_root layer out_var)
  set(root "${CMAKE_BINARY_DIR}/layer_roots/${layer}")
  file(MAKE_DIRECTORY "${root}")
  foreach(l IN LISTS OCTET_LAYERS)
    if(NOT l STREQUAL layer AND ARGN AND NOT l IN_LIST ARGN)
      continue()
    endif()
    if(NOT EXISTS "${root}/${l}")
      file(CREATE_LINK "${CMAKE_SOURCE_DIR}/${l}" "${root}/${l}" SYMBOLIC)
    endif()
    if(l STREQUAL layer)
      break()
    endif()
  endforeach()
  set(${out_var} "${root}" PARENT_SCOPE)
endfunction()

# octet_add_layer(<layer> SOURCES ... DEPS ... [USES ...]): the static library octet_<layer>;
# USES names the layers its sources may include (default: every layer before it).
function(octet_add_layer layer)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;USES" ${ARGN})
  octet_layer_include_root(${layer} root ${ARG_USES})
  if(ARG_SOURCES)
    add_library(octet_${layer} STATIC ${ARG_SOURCES})
    target_include_directories(octet_${layer} PUBLIC "$<BUILD_INTERFACE:${root}>"
                                                     "$<INSTALL_INTERFACE:include/octet>")
    target_link_libraries(octet_${layer} PUBLIC ${ARG_DEPS})
  else()
    add_library(octet_${layer} INTERFACE)
    target_include_directories(octet_${layer} INTERFACE "$<BUILD_INTERFACE:${root}>"
                                                        "$<INSTALL_INTERFACE:include/octet>")
    target_link_libraries(octet_${layer} INTERFACE ${ARG_DEPS})
  endif()
  # Installed as octet::<layer>, the same name the build tree's alias gives it.
  set_target_properties(octet_${layer} PROPERTIES EXPORT_NAME ${layer})
  add_library(octet::${layer} ALIAS octet_${layer})
endfunction()
