// The host limit inside a container (Note [A percent host limit follows the container] in
// shim/hooks/shim_state.cpp): with the default [spill] host_limit (a percent), a job in a 256 MiB
// memory cgroup that spills 512 MiB (to managed memory, or to the pinned host pool) gets
// CUDA_ERROR_OUT_OF_MEMORY and the shim's log line, and exits normally; a host limit taken from the
// machine's MemAvailable would let it spill until the kernel's OOM killer ends it (signal 9, exit
// status 137).
//
// Needs a writable memory cgroup (root, with cgroup v1's memory hierarchy or a cgroup v2 group
// that may have children with the memory controller): the test creates a group below its own,
// runs cgroup_spill_program in it, and removes it. Where that is not possible it skips, saying why.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "subprocess.h"
#include "util/cgroup_memory.h"
#include "util/host_memory.h"

namespace {

using vramspill::testing::Environment;
using vramspill::testing::kUnset;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kCgroupLimit = 256 * kMiB;

// Writes `text` to a cgroup file; the error text when the kernel refuses it, else "".
std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text << std::flush;
  return file ? "" : path + ": " + std::strerror(errno);
}

bool exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

// A memory cgroup of its own below this process's group, with a limit of kCgroupLimit and no
// swap; removed at the end of the test.
class LimitedCgroup {
 public:
  // Empty path() and a reason in skip_reason() when no such group can be made here.
  LimitedCgroup() {
    const vramspill::CgroupMemory own = vramspill::CgroupMemory::locate(vramspill::kSystemRoot);
    if (own.groups().empty()) {
      skip_reason_ = "no memory cgroup is mounted";
      return;
    }
    const std::string path = own.groups().front() + "/vramspill-test-" + std::to_string(getpid());
    if (mkdir(path.c_str(), 0755) != 0) {
      skip_reason_ = "cannot create a memory cgroup " + path + ": " + std::strerror(errno);
      return;
    }
    path_ = path;
    const std::string limit = std::to_string(kCgroupLimit);
    if (exists(path_ + "/memory.limit_in_bytes")) {  // v1: memory, then memory plus swap
      skip_reason_ = write_file(path_ + "/memory.limit_in_bytes", limit);
      if (skip_reason_.empty() && exists(path_ + "/memory.memsw.limit_in_bytes"))
        skip_reason_ = write_file(path_ + "/memory.memsw.limit_in_bytes", limit);
    } else if (exists(path_ + "/memory.max")) {
      skip_reason_ = write_file(path_ + "/memory.max", limit);
      if (skip_reason_.empty() && exists(path_ + "/memory.swap.max"))
        skip_reason_ = write_file(path_ + "/memory.swap.max", "0");
    } else {
      skip_reason_ = "the memory controller is not enabled for " + path_;
    }
  }
  ~LimitedCgroup() {
    if (!path_.empty() && rmdir(path_.c_str()) != 0)
      ADD_FAILURE() << "cannot remove the test's cgroup " << path_ << ": " << std::strerror(errno);
  }
  LimitedCgroup(const LimitedCgroup&) = delete;
  LimitedCgroup& operator=(const LimitedCgroup&) = delete;

  const std::string& skip_reason() const { return skip_reason_; }
  std::string procs() const { return path_ + "/cgroup.procs"; }

 private:
  std::string path_;
  std::string skip_reason_;
};

// Exit statuses of the shell that moves the program into the cgroup before it starts it.
constexpr int kCannotJoin = 97;
constexpr int kCannotRaiseMemlock = 98;

struct Spill {
  const char* mode;       // [spill] mode: "managed" or "host"
  const char* own_when;   // SPILL_OWN_WHEN: "before" or "after"
  const char* tier_name;  // as the shim's log line names the tier
};

// Runs cgroup_spill_program in `cgroup`: the shim with the default host limit (a percent), a
// device budget of 8 MiB (two blocks), 144 MiB of the program's own memory, and 512 MiB to spill.
RunResult spill_in(const LimitedCgroup& cgroup, const Spill& spill) {
  std::string script = "echo $$ > '" + cgroup.procs() + "' || exit " + std::to_string(kCannotJoin);
  // With a percent host limit RLIMIT_MEMLOCK (often 8 MiB) bounds the pinned pool before the host
  // limit does (Note [RLIMIT_MEMLOCK and the host limit] in shim/tiers/host_tier.cpp).
  if (std::string(spill.mode) == "host")
    script += "; ulimit -l unlimited || exit " + std::to_string(kCannotRaiseMemlock);
  script += "; exec \"$0\"";
  const Environment environment = {{"LD_LIBRARY_PATH", VRAMSPILL_TEST_SIMCUDA_DIR},
                                   {"LD_PRELOAD", VRAMSPILL_TEST_PRELOAD},
                                   {"SIMCUDA_VRAM", "64MiB"},
                                   {"SIMCUDA_DEVICES", "1"},
                                   {"VRAMSPILL_DEVICE_BUDGET", "8MiB"},
                                   {"VRAMSPILL_SPILL_MODE", spill.mode},
                                   {"VRAMSPILL_SPILL_HOST_LIMIT", "50%"},
                                   {"VRAMSPILL_LOG_LEVEL", "info"},
                                   {"VRAMSPILL_CONFIG", kUnset},
                                   {"VRAMSPILL_DEVICE_RESERVE", kUnset},
                                   {"VRAMSPILL_SPILL_MIN_SIZE", kUnset},
                                   {"VRAMSPILL_SPILL_MANAGED_LOCATION", kUnset},
                                   {"VRAMSPILL_SPILL_HOST_POOL_STEP", kUnset},
                                   {"VRAMSPILL_SPILL_HOST_POOL_KEEP", kUnset},
                                   {"VRAMSPILL_LOG_FILE", kUnset},
                                   {"SIMCUDA_FAIL", kUnset},
                                   {"SIMCUDA_ATTRS", kUnset},
                                   {"SPILL_OWN_MIB", "144"},
                                   {"SPILL_OWN_WHEN", spill.own_when},
                                   {"SPILL_TOTAL_MIB", "512"}};
  return run_program({"/bin/sh", "-c", script, CGROUP_SPILL_PROGRAM}, environment);
}

// Runs the spill in a fresh 256 MiB cgroup; it must end with a spill refused with OUT_OF_MEMORY
// (error 2), the shim's log line naming the host limit, and a normal exit, never signal 9.
void expect_out_of_memory_not_killed(const Spill& spill) {
  const LimitedCgroup cgroup;
  if (!cgroup.skip_reason().empty()) GTEST_SKIP() << cgroup.skip_reason();
  const RunResult run = spill_in(cgroup, spill);
  if (run.exited(kCannotJoin) || run.exited(kCannotRaiseMemlock))
    GTEST_SKIP() << "cannot start the program in the cgroup as it needs:\n" << run.describe();
  EXPECT_TRUE(run.exited(0)) << run.describe();
  EXPECT_NE(run.out.find("then: error 2\n"), std::string::npos) << run.describe();
  EXPECT_NE(
      run.err.find(std::string("not spilled: ") + spill.tier_name + ": the host limit is reached"),
      std::string::npos)
      << run.describe();
}

// The program's own memory is taken before the shim starts: the limit it starts with is half of
// what the cgroup leaves, not half of the machine's MemAvailable.
TEST(ContainerHostLimit, ManagedSpillsPastTheCgroupAreOutOfMemoryNotTheOomKiller) {
  expect_out_of_memory_not_killed({"managed", "before", "managed memory"});
}

// The same through the pinned host pool, where RLIMIT_MEMLOCK can be lifted (root outside a
// restricted container).
TEST(ContainerHostLimit, HostPoolSpillsPastTheCgroupAreOutOfMemoryNotTheOomKiller) {
  expect_out_of_memory_not_killed({"host", "before", "the pinned host pool"});
}

// The program's own memory is taken after the shim started, when the limit it started with would
// still let the spills fill the cgroup: the re-check as the job runs lowers it.
TEST(ContainerHostLimit, MemoryTakenAfterTheStartLowersTheLimit) {
  expect_out_of_memory_not_killed({"managed", "after", "managed memory"});
}

}  // namespace
