# cmake --install: headers (with the generated reshard_config.h), libreshard.so.<ABI> and
# libreshard.a, the reshard command line, the shipped data under share/reshard, reshard.pc
# (the shared library) and reshard-static.pc (libreshard.a)
# and the CMake package (find_package(reshard CONFIG) -> reshard::reshard).
include(CMakePackageConfigHelpers)

install(DIRECTORY include/reshard ${PROJECT_BINARY_DIR}/include/reshard
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS reshard_shared EXPORT reshard-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS reshard ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET reshard_cli)
  install(TARGETS reshard_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY data/models data/cases DESTINATION ${CMAKE_INSTALL_DATADIR}/reshard)

# --- CMake package ---------------------------------------------------------------------------
set(RESHARD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/reshard)
install(EXPORT reshard-targets NAMESPACE reshard:: DESTINATION ${RESHARD_CMAKE_DIR})
configure_package_config_file(cmake/reshard-config.cmake.in
                              ${PROJECT_BINARY_DIR}/reshard-config.cmake
                              INSTALL_DESTINATION ${RESHARD_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/reshard-config-version.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/reshard-config.cmake
              ${PROJECT_BINARY_DIR}/reshard-config-version.cmake
        DESTINATION ${RESHARD_CMAKE_DIR})

# --- pkg-config --------------------------------------------------------------------------------
# Libs: the shared library; Libs.private (pkg-config --static): what libreshard.a needs.
set(RESHARD_PC_CFLAGS "")
set(RESHARD_PC_LIBS_PRIVATE "-lm -lpthread")
if(CMAKE_DL_LIBS)
  set(RESHARD_PC_LIBS_PRIVATE "-lm -lpthread -l${CMAKE_DL_LIBS}")
endif()
if(RESHARD_HAVE_MPI)
  foreach(d ${MPI_C_INCLUDE_DIRS})
    string(APPEND RESHARD_PC_CFLAGS " -I${d}")
  endforeach()
  foreach(l ${MPI_C_LIBRARIES})
    string(APPEND RESHARD_PC_LIBS_PRIVATE " ${l}")
  endforeach()
endif()
if(RESHARD_HAVE_NCCL)
  string(APPEND RESHARD_PC_LIBS_PRIVATE
         " -L${CUDAToolkit_LIBRARY_DIR} -lcudart ${RESHARD_NCCL_LIBRARY} -lstdc++")
endif()
configure_file(cmake/reshard.pc.in ${PROJECT_BINARY_DIR}/reshard.pc @ONLY)
configure_file(cmake/reshard-static.pc.in ${PROJECT_BINARY_DIR}/reshard-static.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/reshard.pc ${PROJECT_BINARY_DIR}/reshard-static.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
