#include "shim_library.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <optional>

namespace vramspill::cli {
namespace {

// The ELF identification and header of `path`; nullopt when it has none (too short, no magic).
std::optional<Elf64_Ehdr> elf_header(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  Elf64_Ehdr header{};
  // The fields compared below sit at the same offsets in 32- and 64-bit headers.
  if (!file.read(reinterpret_cast<char*>(&header), sizeof header)) return std::nullopt;
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) return std::nullopt;
  return header;
}

std::string type_name(unsigned type) {
  switch (type) {
    case ET_REL:
      return "an object file (ET_REL)";
    case ET_EXEC:
      return "an executable (ET_EXEC)";
    case ET_CORE:
      return "a core dump (ET_CORE)";
    default:
      return "an ELF file of type " + std::to_string(type);
  }
}

}  // namespace

std::string shim_library_problem(const std::string& path) {
  // Note [A preload that cannot load]
  if (path.find(' ') != std::string::npos)
    return "its path contains a space, which LD_PRELOAD takes as a separator; use a path "
           "without one";
  if (path.find(':') != std::string::npos)
    return "its path contains a colon, which LD_PRELOAD takes as a separator; use a path "
           "without one";
  const std::optional<Elf64_Ehdr> library = elf_header(path);
  if (!library) return "it is not an ELF file, so it is not a shared library";
  const std::optional<Elf64_Ehdr> self = elf_header("/proc/self/exe");
  if (!self) return "";  // nothing to compare with: let the loader judge
  if (library->e_ident[EI_CLASS] != self->e_ident[EI_CLASS] ||
      library->e_ident[EI_DATA] != self->e_ident[EI_DATA])
    return "it is an ELF file of another class or byte order than this vramspill (" +
           std::string(library->e_ident[EI_CLASS] == ELFCLASS32 ? "32" : "64") + "-bit " +
           (library->e_ident[EI_DATA] == ELFDATA2MSB ? "big" : "little") + "-endian)";
  if (library->e_machine != self->e_machine)
    return "it is built for ELF machine " + std::to_string(library->e_machine) +
           ", this vramspill for machine " + std::to_string(self->e_machine);
  if (library->e_type != ET_DYN)
    return "it is " + type_name(library->e_type) + ", not a shared library (ET_DYN)";
  return "";
}

std::filesystem::path default_shim_library(const std::filesystem::path& program_dir,
                                           const std::filesystem::path& libdir_from_bindir) {
  constexpr const char* kLibraryName = "libvramspill.so";
  const std::filesystem::path installed =
      (program_dir / libdir_from_bindir / kLibraryName).lexically_normal();
  const std::filesystem::path built =
      (program_dir / ".." / "lib" / kLibraryName).lexically_normal();
  std::error_code error;
  if (!std::filesystem::exists(installed, error) && std::filesystem::exists(built, error))
    return built;
  return installed;
}

}  // namespace vramspill::cli
