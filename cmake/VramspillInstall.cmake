# What `cmake --install` puts where, and the Debian package `cpack` builds from the same rules
# (README.md, "Installing"). Included by the top-level CMakeLists.txt after every target exists;
# GNUInstallDirs is included there before tools/cli, whose `run` needs the layout (below).
#
# Note [The installed layout]
# Two components, both in the one package:
#   runtime  bin/vramspill, bin/vramspill-exporter (which `vramspill exporter` runs from beside
#            it: Note [The exporter is a program of its own] in tools/cli/exporter_launcher.h),
#            <libdir>/libvramspill.so (the multiarch directory on Debian: CMakeLists.txt),
#            share/vramspill/conf/*.toml (the example policies), share/man/man1/vramspill.1 and
#            share/doc/vramspill/copyright
#   demo     train_demo, oom_demo and driver_tour in libexec/vramspill/ (generic names, kept off
#            PATH), with vs_kernels.fatbin when nvcc built it, and simcuda in
#            <libdir>/vramspill/simcuda/, so the installed demo also runs on a machine without a GPU
# simcuda is a libcuda.so.1: in a directory the loader searches by default (<libdir> itself, or
# anything in ld.so.conf) it would take the place of the NVIDIA driver for every CUDA program on
# the machine. So it goes into a directory of its own, reached only through LD_LIBRARY_PATH, and the
# demo programs get no RUNPATH to it (on a GPU they must load the driver). `vramspill run` finds
# the shim from its own directory, by the path from <bindir> to <libdir> that the build compiles
# into it (tools/cli/CMakeLists.txt, default_shim_library in tools/cli/shim_library.h), so a
# distribution's lib/x86_64-linux-gnu or lib64 works as well as lib.

set(VRAMSPILL_INSTALL_PRIVATE_DIR ${CMAKE_INSTALL_LIBEXECDIR}/vramspill)
set(VRAMSPILL_INSTALL_SIMCUDA_DIR ${CMAKE_INSTALL_LIBDIR}/vramspill/simcuda)

# --- runtime --------------------------------------------------------------------------------
install(TARGETS vramspill LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
install(TARGETS vramspill_cli vramspill_exporter RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT runtime)
# Every policy conf/ holds when installing, without a list to keep.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/conf/ DESTINATION ${CMAKE_INSTALL_DATADIR}/vramspill/conf
        COMPONENT runtime FILES_MATCHING PATTERN "*.toml")

# The man page, from the command's own --help texts (tools/cli/help_to_man.py); `vramspill
# exporter --help` is vramspill-exporter's.
set(VRAMSPILL_MAN_PAGE ${CMAKE_BINARY_DIR}/man/vramspill.1)
add_custom_command(
  OUTPUT ${VRAMSPILL_MAN_PAGE}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
  COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tools/cli/help_to_man.py
          --program $<TARGET_FILE:vramspill_cli> --version ${PROJECT_VERSION}
          --policies ${CMAKE_INSTALL_DATADIR}/vramspill/conf --out ${VRAMSPILL_MAN_PAGE}
  DEPENDS vramspill_cli vramspill_exporter ${PROJECT_SOURCE_DIR}/tools/cli/help_to_man.py
  COMMENT "Writing the vramspill(1) man page from vramspill --help"
  VERBATIM)
add_custom_target(vramspill_man_page ALL DEPENDS ${VRAMSPILL_MAN_PAGE})
install(FILES ${VRAMSPILL_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime)
# Where Debian keeps a package's copyright and licence (Debian Policy 12.5), for every install.
install(FILES ${PROJECT_SOURCE_DIR}/cmake/package/copyright
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/vramspill COMPONENT runtime)

# --- demo (Note [The installed layout]) -----------------------------------------------------
install(TARGETS train_demo oom_demo driver_tour RUNTIME DESTINATION ${VRAMSPILL_INSTALL_PRIVATE_DIR}
        COMPONENT demo)
# libcuda.so.1 only: the libcuda.so name link is for linking, and nothing links simcuda.
install(TARGETS simcuda LIBRARY DESTINATION ${VRAMSPILL_INSTALL_SIMCUDA_DIR} COMPONENT demo
        NAMELINK_SKIP)
# OPTIONAL: a tree built target by target may lack it, and the demo runs on simcuda without it.
if(TARGET simcuda_vs_kernels)
  install(FILES ${SIMCUDA_VS_KERNELS_FATBIN} DESTINATION ${VRAMSPILL_INSTALL_PRIVATE_DIR}
          COMPONENT demo OPTIONAL)
endif()

# --- The Debian package -----------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_NAME vramspill)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "run CUDA jobs within a VRAM budget, spilling the rest to host RAM")
# One line of the control file's long description per line here, each under 80 columns as
# Debian Policy 5.6.13 asks (CPack indents them).
set(CPACK_PACKAGE_DESCRIPTION
    "vramspill is a shim preloaded into unmodified CUDA programs (LD_PRELOAD)
that gives them a device-memory budget and places what does not fit in host
memory, so a job larger than the GPU keeps running. The vramspill command
starts jobs under a policy file and shows the ones running.
The package also holds demo programs and simcuda, a simulated CUDA driver for
running them without a GPU, in private directories the loader does not search.")
set(VRAMSPILL_PACKAGE_MAINTAINER
    "vramspill maintainers <maintainers@users.noreply.a-seed-8c242645.example>"
    CACHE STRING "The Maintainer field of the Debian package")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${VRAMSPILL_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # vramspill_<version>_<arch>.deb
set(CPACK_STRIP_FILES ON)
# The shim dlopen()s these when present (cmake/VramspillDependencies.cmake, Note [Preload-safe
# dependency targets]), so dpkg-shlibdeps cannot see them.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libmimalloc2.0, libunwind8")
find_program(VRAMSPILL_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(VRAMSPILL_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  # The demo programs need libcuda.so.1: the package's own simcuda satisfies dpkg-shlibdeps
  # (which runs in the package's root), so the package does not depend on a driver.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS usr/${VRAMSPILL_INSTALL_SIMCUDA_DIR})
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libstdc++6, libgcc-s1")
endif()
include(CPack)
