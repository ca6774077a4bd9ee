# `cmake --install`: ccc_runtime and ccc_compiler (static, the device prelude and the shipped
# schedules compiled in), the public API headers, the ccc command, and a package config, so an
# outside project does find_package(ccc) and links ccc::runtime.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CCC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ccc)

set_target_properties(ccc_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(ccc_compiler PROPERTIES EXPORT_NAME compiler)
install(TARGETS ccc_runtime ccc_compiler EXPORT ccc-targets
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ccc)

# include/ccc: the C API, and ccc/communicator.h with what it includes. Every other header is
# internal and lives beside its sources.
install(DIRECTORY include/ccc DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

install(EXPORT ccc-targets NAMESPACE ccc:: DESTINATION ${CCC_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/ccc-config.cmake.in ${PROJECT_BINARY_DIR}/ccc-config.cmake
  INSTALL_DESTINATION ${CCC_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ccc-config-version.cmake
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may break the API
install(FILES ${PROJECT_BINARY_DIR}/ccc-config.cmake ${PROJECT_BINARY_DIR}/ccc-config-version.cmake
  DESTINATION ${CCC_INSTALL_CMAKEDIR})
