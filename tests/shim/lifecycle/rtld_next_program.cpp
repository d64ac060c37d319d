// dlsym(RTLD_NEXT, ...) under the shim still answers relative to the caller. The program's first
// action is a getpid() that libnext_probe.so (preloaded after the shim) interposes, so the
// probe's dlsym(RTLD_NEXT, "getpid") is the process's first dlsym call; then a cuserid() it
// interposes too, a name that starts like the driver's. Then the executable itself asks for
// RTLD_NEXT "puts". Prints what each lookup found.
#include <sys/syscall.h>
#include <unistd.h>

#include "program_support.h"

using vramspill::testing::object_of;

int main() {
  const pid_t pid = getpid();  // first: no dlsym call before this one
  std::printf("getpid matches the kernel: %s\n",
              pid == static_cast<pid_t>(syscall(SYS_getpid)) ? "yes" : "no");
  char user[L_cuserid];
  (void)cuserid(user);
  using Status = void (*)(const char*, int*, int*, void**);
  auto* status = reinterpret_cast<Status>(dlsym(RTLD_DEFAULT, "next_probe_status"));
  for (const char* function : {"getpid", "cuserid"}) {
    if (status == nullptr) break;
    int calls = 0, recursions = 0;
    void* found = nullptr;
    status(function, &calls, &recursions, &found);
    std::printf("probe %s: calls=%d recursions=%d next=%s\n", function, calls, recursions,
                object_of(found).c_str());
  }
  std::printf("RTLD_NEXT puts: %s\n", object_of(dlsym(RTLD_NEXT, "puts")).c_str());
  std::printf("RTLD_DEFAULT puts: %s\n", object_of(dlsym(RTLD_DEFAULT, "puts")).c_str());
  std::printf("RTLD_NEXT getpid: %s\n", object_of(dlsym(RTLD_NEXT, "getpid")).c_str());
  return 0;
}
