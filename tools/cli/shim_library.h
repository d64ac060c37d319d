// Where `vramspill run` finds the shim, and the checks it makes before it preloads it.
//
// Note [A preload that cannot load]
// The dynamic loader skips an LD_PRELOAD entry it cannot load, with one line on standard error,
// and runs the program anyway: a wrong --library would run the job without the shim, no budget
// and no spilling, and exit 0. So `run` refuses, before starting anything, a path that LD_PRELOAD
// would split (it separates entries at spaces and colons, with no way to quote them) and a file
// that is not a shared object the loader could map into this kind of process (ELF magic, ELF
// class, byte order and machine as this program's own, type ET_DYN).
#pragma once

#include <filesystem>
#include <string>

namespace vramspill::cli {

// "" when `path` can be preloaded as far as its name and ELF header tell, else what is wrong
// ("its path contains a space, ...", "it is not an ELF file", ...). `path` is readable.
std::string shim_library_problem(const std::string& path);

// Where `run` finds the shim when neither --library nor VRAMSPILL_LIBRARY names one, given the
// directory `program_dir` of the running vramspill: an install's libvramspill.so,
// `program_dir`/`libdir_from_bindir` (the build's CMAKE_INSTALL_LIBDIR seen from its
// CMAKE_INSTALL_BINDIR: ../lib, ../lib64 or ../lib/x86_64-linux-gnu), else the build tree's,
// `program_dir`/../lib. The install's path when neither exists, to be reported as missing.
std::filesystem::path default_shim_library(const std::filesystem::path& program_dir,
                                           const std::filesystem::path& libdir_from_bindir);

}  // namespace vramspill::cli
