# `cmake --install`: the public headers under include/octet/ (the umbrella octet/octet.h and the
# library layers' headers, without the backends' internals), the library layers and the umbrella
# target exported as octet::*, a relocatable CMake package, and the octet program. The command-line
# layer (tools/) is the program's own: neither its headers nor its library are installed.
# Included after every layer folder so that the targets it names are already defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(OCTET_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/octet")

# Consumers write #include "octet/octet.h" (include/ is on their path); the headers behind it
# include each other from the layer root ("runtime/tensor.h"), so include/octet is on it too (the
# INSTALL_INTERFACE in cmake/layers.cmake).
set(OCTET_LIBRARY_LAYERS ${OCTET_LAYERS})
list(REMOVE_ITEM OCTET_LIBRARY_LAYERS tools)
install(FILES "${PROJECT_SOURCE_DIR}/include/octet/octet.h"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/octet")
foreach(layer IN LISTS OCTET_LIBRARY_LAYERS)
  # The backends' internals (kernels/cpu, kernels/cuda, the dispatch table, the shared device
  # math) are not API.
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${layer}/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/octet/${layer}"
          FILES_MATCHING PATTERN "*.h"
          PATTERN "cpu" EXCLUDE PATTERN "cuda" EXCLUDE PATTERN "math" EXCLUDE
          PATTERN "backend.h" EXCLUDE PATTERN "device_policy.h" EXCLUDE)
endforeach()

set(octet_export_targets "")
foreach(layer IN LISTS OCTET_LIBRARY_LAYERS)
  list(APPEND octet_export_targets octet_${layer})
endforeach()
install(TARGETS ${octet_export_targets} octet
        EXPORT octetTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/octet")
install(EXPORT octetTargets NAMESPACE octet:: DESTINATION "${OCTET_INSTALL_CMAKEDIR}")

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/octetConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/octetConfig.cmake"
                              INSTALL_DESTINATION "${OCTET_INSTALL_CMAKEDIR}")
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/octetConfigVersion.cmake"
                                 VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/octetConfig.cmake"
              "${PROJECT_BINARY_DIR}/octetConfigVersion.cmake"
        DESTINATION "${OCTET_INSTALL_CMAKEDIR}")

# The command-line program: whatever executables tools/ defines (the target's name is tools/'s
# business), installed to bin. None yet is fine: the library install does not depend on it.
get_property(octet_tool_targets DIRECTORY "${PROJECT_SOURCE_DIR}/tools"
             PROPERTY BUILDSYSTEM_TARGETS)
foreach(target IN LISTS octet_tool_targets)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    install(TARGETS ${target} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
  endif()
endforeach()
