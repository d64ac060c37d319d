// A program bound to dlsym@GLIBC_2.2.5, as every binary linked before glibc 2.34 is: under the
// shim its driver lookups must come back as the hooks, exactly as with dlsym@@GLIBC_2.34.
#include "program_support.h"

using vramspill::testing::object_of;

extern "C" void* dlsym_old(void* handle, const char* symbol);
__asm__(".symver dlsym_old, dlsym@GLIBC_2.2.5");

int main() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(driver != nullptr);
  std::printf("dlsym_old is %s\n", object_of(reinterpret_cast<void*>(&dlsym_old)).c_str());
  for (const char* name : {"cuMemAlloc_v2", "cuGetProcAddress_v2", "cuLaunchKernel", "cuInit",
                           "cuDeviceGet", "cuMemAlloc"}) {
    void* old_version = dlsym_old(driver, name);
    void* new_version = dlsym(driver, name);
    std::printf("%s: old=%s new=%s same=%s\n", name, object_of(old_version).c_str(),
                object_of(new_version).c_str(), old_version == new_version ? "yes" : "no");
  }
  std::printf("old RTLD_NEXT puts: %s\n", object_of(dlsym_old(RTLD_NEXT, "puts")).c_str());
  return 0;
}
