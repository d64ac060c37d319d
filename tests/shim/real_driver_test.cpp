// driver/real_driver.h: how the shim finds the real driver's exports. An export the loaded driver
// lacks is looked up once, not at every call (Note [Exports the driver lacks]); while no driver is
// loaded nothing is cached, so the export is found once one is.
#include "driver/real_driver.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>

namespace {

std::atomic<int> noload_opens{0};

}  // namespace

// Counts the lookups of the loaded driver (find_real_function's dlopen with RTLD_NOLOAD); the
// shim's code linked into this program calls this definition.
extern "C" void* dlopen(const char* file, int mode) noexcept {
  using Dlopen = void* (*)(const char*, int);
  static const auto real = reinterpret_cast<Dlopen>(dlsym(RTLD_NEXT, "dlopen"));
  if ((mode & RTLD_NOLOAD) != 0) ++noload_opens;
  return real(file, mode);
}

namespace vramspill::driver {
namespace {

using Function = void (*)();

TEST(RealDriver, AnExportTheLoadedDriverLacksIsLookedUpOnce) {
  std::atomic<Function> lacked{nullptr};
  std::atomic<Function> init{nullptr};
  ASSERT_EQ(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD), nullptr) << "loaded too early";
  EXPECT_EQ(resolve(init, "cuInit"), nullptr) << "no driver is loaded yet";
  EXPECT_EQ(resolve(lacked, "cuNoSuchExport"), nullptr);

  void* const simcuda = dlopen(SIMCUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);  // as the runtime does
  ASSERT_NE(simcuda, nullptr) << dlerror();
  EXPECT_NE(resolve(init, "cuInit"), nullptr) << "cached as missing before the driver was loaded";
  const int before = noload_opens.load();
  for (int call = 0; call < 100; ++call) EXPECT_EQ(resolve(lacked, "cuNoSuchExport"), nullptr);
  EXPECT_EQ(noload_opens.load() - before, 1);
  EXPECT_NE(resolve(init, "cuInit"), nullptr);
  EXPECT_EQ(noload_opens.load() - before, 1) << "a found export is looked up again";
}

}  // namespace
}  // namespace vramspill::driver
