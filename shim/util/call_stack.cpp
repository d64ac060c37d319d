#include "util/call_stack.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace vramspill {
namespace {

using Backtrace = int (*)(void** addresses, int size);

// Note [Call sites through libunwind]: loaded once, on the first capture.
struct Unwinder {
  std::once_flag loaded;
  Backtrace backtrace = nullptr;
  char why[192] = {};
};

Unwinder& unwinder() noexcept {
  static constinit Unwinder loaded_once;
  return loaded_once;
}

void load(Unwinder& unwinder) noexcept {
  void* library = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = dlerror();
    std::strncpy(unwinder.why, error != nullptr ? error : "libunwind.so.8 could not be loaded",
                 sizeof unwinder.why - 1);
    return;
  }
  unwinder.backtrace = reinterpret_cast<Backtrace>(dlsym(library, "unw_backtrace"));
  if (unwinder.backtrace == nullptr)
    std::strncpy(unwinder.why, "libunwind.so.8 has no unw_backtrace", sizeof unwinder.why - 1);
}

std::string_view file_name(const char* path) {
  if (path == nullptr) return {};
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

const void* object_base(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0) return nullptr;
  return info.dli_fbase;
}

}  // namespace

bool capture_call_stack(const void* skip_object, CallStack& stack, std::string_view& why) noexcept {
  stack.count = 0;
  Unwinder& loaded = unwinder();
  try {
    std::call_once(loaded.loaded, load, std::ref(loaded));
  } catch (...) {  // std::system_error: no unwinder this time
    why = "the thread that loads libunwind.so.8 failed to start it";
    return false;
  }
  if (loaded.backtrace == nullptr) {
    why = loaded.why;
    return false;
  }
  // More addresses than frames kept: the shim's own frames are left out after the walk.
  void* addresses[CallStack::kDepth + 8];
  const int walked = loaded.backtrace(addresses, static_cast<int>(std::size(addresses)));
  const void* skip_base = object_base(skip_object);
  for (int i = 0; i < walked && stack.count < CallStack::kDepth; ++i) {
    // A return address is one past the call; the call itself is what belongs to the caller
    // (a call at a function's very end would otherwise be named after the next function).
    const auto* inside = static_cast<const char*>(addresses[i]) - 1;
    Dl_info info{};
    if (dladdr(inside, &info) == 0) continue;
    if (skip_base != nullptr && info.dli_fbase == skip_base) continue;
    stack.frames[stack.count++] = {.library = file_name(info.dli_fname),
                                   .symbol = info.dli_sname != nullptr ? info.dli_sname : ""};
  }
  return true;
}

}  // namespace vramspill
