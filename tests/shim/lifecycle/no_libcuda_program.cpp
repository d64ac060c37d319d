// A program that never loads libcuda (shim/README.md, "Interception": the shim must not load it
// either). It looks a driver name up in the global scope and, when the shim is preloaded, calls the
// shim's exported hooks directly, as a program bound to them would; then it checks that no libcuda
// is mapped. Prints one line per observation.
#include "program_support.h"

using vramspill::testing::is_mapped;
using vramspill::testing::object_of;

int main() {
  CHECK(!is_mapped("libcuda.so"));
  void* found = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  std::printf("dlsym(RTLD_DEFAULT, \"cuMemAlloc_v2\"): %s\n",
              found == nullptr ? "null" : object_of(found).c_str());
  void* shim = dlopen("libvramspill.so", RTLD_NOW | RTLD_NOLOAD);
  if (shim != nullptr) {
    using Init = CUresult (*)(unsigned int);
    using Alloc = CUresult (*)(CUdeviceptr*, size_t);
    using Info = CUresult (*)(size_t*, size_t*);
    using Lookup =
        CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto* init = reinterpret_cast<Init>(dlsym(shim, "cuInit"));
    auto* alloc = reinterpret_cast<Alloc>(dlsym(shim, "cuMemAlloc_v2"));
    auto* info = reinterpret_cast<Info>(dlsym(shim, "cuMemGetInfo_v2"));
    auto* lookup = reinterpret_cast<Lookup>(dlsym(shim, "cuGetProcAddress_v2"));
    CHECK(init != nullptr && alloc != nullptr && info != nullptr && lookup != nullptr);
    CUdeviceptr pointer = 0;
    size_t free = 0, total = 0;
    void* function = nullptr;
    std::printf("shim cuInit: %d\n", static_cast<int>(init(0)));
    std::printf("shim cuMemAlloc_v2: %d\n", static_cast<int>(alloc(&pointer, 1 << 20)));
    std::printf("shim cuMemGetInfo_v2: %d\n", static_cast<int>(info(&free, &total)));
    std::printf("shim cuGetProcAddress_v2: %d\n",
                static_cast<int>(lookup("cuMemAlloc", &function, 12000, 0, nullptr)));
  }
  std::printf("libcuda mapped: %s\n", is_mapped("libcuda.so") ? "yes" : "no");
  return 7;
}
