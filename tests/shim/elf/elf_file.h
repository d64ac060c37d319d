// A read-only view of a 64-bit ELF shared object's dynamic section and dynamic symbol table, with
// symbol versions: what the dynamic linker sees when it loads the object. Enough for the shim's
// hygiene tests (shim/README.md, "What a preloaded library may link") without readelf or
// objdump.
#pragma once

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vramspill::testing {

struct DynamicSymbol {
  std::string name;
  std::string version;           // empty: unversioned (local or global index)
  bool default_version = false;  // name@@version (not hidden); false for name@version
  bool defined = false;          // st_shndx != SHN_UNDEF
  bool absolute = false;         // st_shndx == SHN_ABS (version-definition symbols)
  unsigned char binding = STB_LOCAL;
  unsigned char type = STT_NOTYPE;

  // "dlsym@@GLIBC_2.34", "dlsym@GLIBC_2.2.5", "cuInit@@VRAMSPILL_1", "malloc".
  std::string display() const {
    if (version.empty()) return name;
    return name + (default_version ? "@@" : "@") + version;
  }
};

struct VersionNeed {
  std::string file;     // "libc.so.6"
  std::string version;  // "GLIBC_2.2.5"
};

class ElfFile {
 public:
  explicit ElfFile(const std::string& path) : path_(path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (bytes_.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes_.data(), ELFMAG, SELFMAG) != 0)
      throw std::runtime_error(path + " is not an ELF file");
    header_ = at<Elf64_Ehdr>(0);
    if (header_.e_ident[EI_CLASS] != ELFCLASS64)
      throw std::runtime_error(path + " is not a 64-bit ELF file");
    for (std::size_t i = 0; i < header_.e_shnum; ++i)
      sections_.push_back(at<Elf64_Shdr>(header_.e_shoff + i * header_.e_shentsize));
    read_dynamic();
    read_versions();
    read_symbols();
  }

  const std::string& path() const { return path_; }
  const std::vector<std::string>& needed() const { return needed_; }
  const std::optional<std::string>& soname() const { return soname_; }
  const std::vector<DynamicSymbol>& dynamic_symbols() const { return symbols_; }
  // Names of the versions the object defines (.gnu.version_d), the base (its own name) included.
  const std::vector<std::string>& version_definitions() const { return version_definitions_; }
  // Versions the object needs from others (.gnu.version_r).
  const std::vector<VersionNeed>& version_needs() const { return version_needs_; }
  // Entries in DT_INIT_ARRAY (functions run when the object is loaded), and whether DT_INIT is set.
  std::size_t init_array_entries() const { return init_array_entries_; }
  bool has_init_function() const { return has_init_; }

 private:
  template <typename T>
  T at(uint64_t offset) const {
    if (offset > bytes_.size() || bytes_.size() - offset < sizeof(T))
      throw std::runtime_error(path_ + ": truncated ELF data");
    T value;
    std::memcpy(&value, bytes_.data() + offset, sizeof(T));
    return value;
  }

  std::string string_at(const Elf64_Shdr& table, uint64_t index) const {
    const uint64_t offset = table.sh_offset + index;
    if (index >= table.sh_size || offset >= bytes_.size())
      throw std::runtime_error(path_ + ": string index out of range");
    const char* start = bytes_.data() + offset;
    return std::string(start, strnlen(start, table.sh_size - index));
  }

  const Elf64_Shdr* section_of_type(uint32_t type) const {
    for (const Elf64_Shdr& section : sections_)
      if (section.sh_type == type) return &section;
    return nullptr;
  }

  const Elf64_Shdr& linked(const Elf64_Shdr& section) const {
    if (section.sh_link >= sections_.size()) throw std::runtime_error(path_ + ": bad section link");
    return sections_[section.sh_link];
  }

  void read_dynamic() {
    const Elf64_Shdr* dynamic = section_of_type(SHT_DYNAMIC);
    if (dynamic == nullptr) throw std::runtime_error(path_ + " has no dynamic section");
    const Elf64_Shdr& strings = linked(*dynamic);
    uint64_t init_array_size = 0;
    for (uint64_t offset = 0; offset + sizeof(Elf64_Dyn) <= dynamic->sh_size;
         offset += sizeof(Elf64_Dyn)) {
      const auto entry = at<Elf64_Dyn>(dynamic->sh_offset + offset);
      if (entry.d_tag == DT_NULL) break;
      if (entry.d_tag == DT_NEEDED) needed_.push_back(string_at(strings, entry.d_un.d_val));
      if (entry.d_tag == DT_SONAME) soname_ = string_at(strings, entry.d_un.d_val);
      if (entry.d_tag == DT_INIT_ARRAYSZ) init_array_size = entry.d_un.d_val;
      if (entry.d_tag == DT_INIT) has_init_ = true;
    }
    init_array_entries_ = init_array_size / sizeof(Elf64_Addr);
  }

  void read_versions() {
    if (const Elf64_Shdr* definitions = section_of_type(SHT_GNU_verdef)) {
      const Elf64_Shdr& strings = linked(*definitions);
      uint64_t offset = definitions->sh_offset;
      for (uint64_t i = 0; i < definitions->sh_info; ++i) {
        const auto definition = at<Elf64_Verdef>(offset);
        const auto aux = at<Elf64_Verdaux>(offset + definition.vd_aux);
        const std::string name = string_at(strings, aux.vda_name);
        version_definitions_.push_back(name);
        if (version_names_.size() <= definition.vd_ndx)
          version_names_.resize(definition.vd_ndx + 1);
        version_names_[definition.vd_ndx] = name;
        if (definition.vd_next == 0) break;
        offset += definition.vd_next;
      }
    }
    if (const Elf64_Shdr* needs = section_of_type(SHT_GNU_verneed)) {
      const Elf64_Shdr& strings = linked(*needs);
      uint64_t offset = needs->sh_offset;
      for (uint64_t i = 0; i < needs->sh_info; ++i) {
        const auto need = at<Elf64_Verneed>(offset);
        const std::string file = string_at(strings, need.vn_file);
        uint64_t aux_offset = offset + need.vn_aux;
        for (uint64_t j = 0; j < need.vn_cnt; ++j) {
          const auto aux = at<Elf64_Vernaux>(aux_offset);
          const std::string name = string_at(strings, aux.vna_name);
          version_needs_.push_back({file, name});
          const uint16_t index = aux.vna_other & 0x7fff;
          if (version_names_.size() <= index) version_names_.resize(index + 1);
          version_names_[index] = name;
          if (aux.vna_next == 0) break;
          aux_offset += aux.vna_next;
        }
        if (need.vn_next == 0) break;
        offset += need.vn_next;
      }
    }
  }

  void read_symbols() {
    const Elf64_Shdr* table = section_of_type(SHT_DYNSYM);
    if (table == nullptr) return;
    const Elf64_Shdr& strings = linked(*table);
    const Elf64_Shdr* versions = section_of_type(SHT_GNU_versym);
    const uint64_t count = table->sh_size / sizeof(Elf64_Sym);
    for (uint64_t i = 1; i < count; ++i) {  // entry 0 is the null symbol
      const auto symbol = at<Elf64_Sym>(table->sh_offset + i * sizeof(Elf64_Sym));
      DynamicSymbol out;
      out.name = string_at(strings, symbol.st_name);
      out.defined = symbol.st_shndx != SHN_UNDEF;
      out.absolute = symbol.st_shndx == SHN_ABS;
      out.binding = ELF64_ST_BIND(symbol.st_info);
      out.type = ELF64_ST_TYPE(symbol.st_info);
      if (versions != nullptr) {
        const auto version = at<Elf64_Half>(versions->sh_offset + i * sizeof(Elf64_Half));
        const uint16_t index = version & 0x7fff;
        if (index > VER_NDX_GLOBAL && index < version_names_.size())
          out.version = version_names_[index];
        out.default_version = (version & 0x8000) == 0;
      }
      symbols_.push_back(std::move(out));
    }
  }

  std::string path_;
  std::vector<char> bytes_;
  Elf64_Ehdr header_{};
  std::vector<Elf64_Shdr> sections_;
  std::vector<std::string> needed_;
  std::optional<std::string> soname_;
  std::vector<std::string> version_names_;  // by version index
  std::vector<std::string> version_definitions_;
  std::vector<VersionNeed> version_needs_;
  std::vector<DynamicSymbol> symbols_;
  std::size_t init_array_entries_ = 0;
  bool has_init_ = false;
};

}  // namespace vramspill::testing
