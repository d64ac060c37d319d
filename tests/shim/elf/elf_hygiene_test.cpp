// What libvramspill.so brings into every process that inherits LD_PRELOAD (shim/README.md, "What a
// preloaded library may link"): the libraries it needs and the symbols it exports. Anything more
// than the C/C++ runtime and anything exported beyond dlsym and the hooks would change programs
// that never asked for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "driver/driver_functions.h"
#include "elf_file.h"

namespace {

using vramspill::testing::DynamicSymbol;
using vramspill::testing::ElfFile;

const ElfFile& shim() {
  static const ElfFile file(VRAMSPILL_TEST_SHIM);
  return file;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The C and C++ runtime, which every C++ program has loaded anyway; in sanitizer builds, their
// runtimes too.
bool allowed_dependency(const std::string& name) {
  static const std::set<std::string> runtime = {"libc.so.6",     "libm.so.6",  "libstdc++.so.6",
                                                "libgcc_s.so.1", "libdl.so.2", "libpthread.so.0"};
  if (runtime.contains(name)) return true;
  if (starts_with(name, "ld-linux")) return true;  // ld-linux-x86-64.so.2, ld-linux-aarch64.so.1
#if VRAMSPILL_TEST_SANITIZED
  if (starts_with(name, "libasan.so.") || starts_with(name, "libubsan.so.")) return true;
#endif
  return false;
}

std::set<std::string> hooked_functions() {
  return {
#define VRAMSPILL_TEST_NAME(name) #name,
      VRAMSPILL_HOOKED_FUNCTIONS(VRAMSPILL_TEST_NAME)
#undef VRAMSPILL_TEST_NAME
  };
}

// Defined, global or weak symbols, except the version-definition symbols (GLIBC_2.34 etc. are
// absolute symbols named after the version they define).
std::vector<DynamicSymbol> exports() {
  std::vector<DynamicSymbol> out;
  for (const DynamicSymbol& symbol : shim().dynamic_symbols()) {
    if (!symbol.defined || symbol.binding == STB_LOCAL) continue;
    if (symbol.absolute && symbol.name == symbol.version) continue;
    out.push_back(symbol);
  }
  return out;
}

TEST(ShimElf, IsASharedObjectWithASoname) {
  ASSERT_TRUE(shim().soname().has_value());
  EXPECT_EQ(*shim().soname(), "libvramspill.so");
}

TEST(ShimElf, NeedsOnlyTheCAndCxxRuntime) {
  ASSERT_FALSE(shim().needed().empty());
  for (const std::string& name : shim().needed())
    EXPECT_TRUE(allowed_dependency(name))
        << "libvramspill.so has DT_NEEDED " << name
        << ": it would be loaded into every process that inherits LD_PRELOAD "
           "(Note [Preload-safe dependency targets])";
  // The ones shim/README.md names ("What a preloaded library may link"), explicitly.
  for (const char* banned : {"libmimalloc", "libunwind", "libspdlog", "libfmt", "libtomlplusplus",
                             "libcuda", "libcudart"})
    for (const std::string& name : shim().needed())
      EXPECT_FALSE(starts_with(name, banned)) << "DT_NEEDED " << name;
}

TEST(ShimElf, ExportsOnlyDlsymAndHooks) {
  const std::set<std::string> hooks = hooked_functions();
  for (const DynamicSymbol& symbol : exports()) {
    if (symbol.name == "dlsym") continue;  // checked by ExportsDlsymUnderBothGlibcVersions
    EXPECT_TRUE(hooks.contains(symbol.name))
        << "libvramspill.so exports " << symbol.display()
        << ", which is neither dlsym nor a hook in shim/driver/driver_functions.h";
    if (hooks.contains(symbol.name)) {
      EXPECT_EQ(symbol.version, "VRAMSPILL_1") << symbol.display();
      EXPECT_TRUE(symbol.default_version) << symbol.display();
      EXPECT_EQ(symbol.type, STT_FUNC) << symbol.display();
    }
  }
}

TEST(ShimElf, ExportsEveryHook) {
  std::set<std::string> exported;
  for (const DynamicSymbol& symbol : exports()) exported.insert(symbol.name);
  for (const std::string& hook : hooked_functions())
    EXPECT_TRUE(exported.contains(hook))
        << hook
        << " is in the hooked lists but not exported: programs linked to libcuda "
           "would call the driver directly";
}

TEST(ShimElf, ExportsDlsymUnderBothGlibcVersions) {
  std::multiset<std::string> dlsyms;
  for (const DynamicSymbol& symbol : exports())
    if (symbol.name == "dlsym") dlsyms.insert(symbol.display());
  EXPECT_EQ(dlsyms, (std::multiset<std::string>{"dlsym@GLIBC_2.2.5", "dlsym@@GLIBC_2.34"}));
}

TEST(ShimElf, DefinesOnlyItsOwnVersions) {
  std::vector<std::string> versions = shim().version_definitions();
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(versions, (std::vector<std::string>{"GLIBC_2.2.5", "GLIBC_2.34", "VRAMSPILL_1",
                                                "libvramspill.so"}));
}

TEST(ShimElf, NoLibraryInternalsLeak) {
  // Belt and braces over ExportsOnlyDlsymAndHooks: the failure names what leaked.
  for (const DynamicSymbol& symbol : exports()) {
    EXPECT_FALSE(starts_with(symbol.name, "_Z")) << "C++ symbol exported: " << symbol.display();
    for (const char* internal :
         {"spdlog", "fmt", "toml", "mi_", "_Unwind", "malloc", "free", "operator", "vramspill"})
      EXPECT_EQ(symbol.name.find(internal), std::string::npos) << "exported: " << symbol.display();
  }
}

}  // namespace
