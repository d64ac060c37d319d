// libnext_probe.so: preloaded after libvramspill.so, it interposes getpid and cuserid and finds
// the next definitions with dlsym(RTLD_NEXT, ...), as interposers (tracers, fakers) do. glibc
// answers RTLD_NEXT relative to the caller, so this must reach the C library's functions; an
// answer relative to the shim would be these very functions (Note [Why dlsym starts in
// assembly]). cuserid starts with "cu" like the driver's names, but is none of them. A guard
// turns a recursion into a recorded failure instead of a stack overflow.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

struct Probe {
  int calls = 0;
  int recursions = 0;
  void* next_found = nullptr;
};

thread_local int depth = 0;
Probe getpid_probe;
Probe cuserid_probe;

// Calls the next definition of `name`, or `fallback` when dlsym handed back the probe's own
// (a recursion, recorded) or nothing.
template <typename Function, typename Fallback, typename... Args>
auto call_next(const char* name, Probe& probe, Fallback fallback, Args... args) {
  if (depth > 0) {
    ++probe.recursions;
    return fallback(args...);
  }
  ++depth;
  auto* next = reinterpret_cast<Function>(dlsym(RTLD_NEXT, name));
  probe.next_found = reinterpret_cast<void*>(next);
  const auto result = next != nullptr ? next(args...) : fallback(args...);
  --depth;
  ++probe.calls;
  return result;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) pid_t getpid() {
  return call_next<pid_t (*)()>("getpid", getpid_probe,
                                [] { return static_cast<pid_t>(syscall(SYS_getpid)); });
}

__attribute__((visibility("default"))) char* cuserid(char* name) {
  return call_next<char* (*)(char*)>("cuserid", cuserid_probe,
                                     [](char*) { return static_cast<char*>(nullptr); }, name);
}

// What the interposer of `function` ("getpid" or "cuserid") saw.
__attribute__((visibility("default"))) void next_probe_status(const char* function,
                                                              int* call_count,
                                                              int* recursion_count, void** found) {
  const Probe& probe = strcmp(function, "getpid") == 0 ? getpid_probe : cuserid_probe;
  *call_count = probe.calls;
  *recursion_count = probe.recursions;
  *found = probe.next_found;
}

}  // extern "C"
