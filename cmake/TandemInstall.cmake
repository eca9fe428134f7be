# Installs libtandem.a, the public headers of every layer and a package
# config, so that consumers write find_package(tandem) and link tandem::tandem.
include(CMakePackageConfigHelpers)

set(TANDEM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)

install(TARGETS tandem EXPORT tandemTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(layer IN ITEMS core host device scheduler)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/include/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(EXPORT tandemTargets NAMESPACE tandem:: DESTINATION ${TANDEM_INSTALL_CMAKEDIR})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/tandemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tandemConfig.cmake
  INSTALL_DESTINATION ${TANDEM_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tandemConfig.cmake
              ${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake
        DESTINATION ${TANDEM_INSTALL_CMAKEDIR})
