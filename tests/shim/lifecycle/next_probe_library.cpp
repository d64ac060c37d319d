// libnext_probe.so: preloaded after libvramspill.so, it interposes getpid and finds the next
// definition with dlsym(RTLD_NEXT, ...), as interposers (tracers, fakers) do. glibc answers
// RTLD_NEXT relative to the caller, so this must reach the C library's getpid; an answer relative
// to the shim would be this very function (Note [Why dlsym starts in assembly]). A guard turns
// that recursion into a recorded failure instead of a stack overflow.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {
thread_local int depth = 0;
int calls = 0;
int recursions = 0;
void* next_found = nullptr;
}  // namespace

extern "C" {

__attribute__((visibility("default"))) pid_t getpid() {
  if (depth > 0) {  // dlsym(RTLD_NEXT) handed us ourselves
    ++recursions;
    return static_cast<pid_t>(syscall(SYS_getpid));
  }
  ++depth;
  using GetPid = pid_t (*)();
  auto* next = reinterpret_cast<GetPid>(dlsym(RTLD_NEXT, "getpid"));
  next_found = reinterpret_cast<void*>(next);
  const pid_t pid = next != nullptr ? next() : -1;
  --depth;
  ++calls;
  return pid;
}

__attribute__((visibility("default"))) void next_probe_status(int* call_count, int* recursion_count,
                                                              void** found) {
  *call_count = calls;
  *recursion_count = recursions;
  *found = next_found;
}

}  // extern "C"
