// The shim over a process's life (Note [Entering the shim] in hooks/shim_state.h): programs are
// started with and without libvramspill.so preloaded, simcuda first on the loader path, and what
// they print and how they exit is compared.
//
// Sanitizer builds preload the ASan runtime ahead of the shim (PreloadTestSupport.cmake): an
// ASan-built shim cannot be preloaded into a program without it. Foreign programs (/bin/true,
// sh, python) are then compared with a baseline run that preloads the ASan runtime alone, both
// with leak detection off (LeakSanitizer would report python's own leaks and change its exit
// code), so the comparison still isolates what the shim adds. ASan's interceptors come first in
// the search order there, so lookups of the functions it intercepts (puts) find the runtime.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "elf_file.h"
#include "subprocess.h"

namespace {

using vramspill::testing::ElfFile;
using vramspill::testing::Environment;
using vramspill::testing::kUnset;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;

constexpr bool kSanitized = VRAMSPILL_TEST_SANITIZED != 0;

// simcuda on the loader path, no preload, none of the shim's settings from the caller's
// environment.
Environment base_environment(const Environment& extra = {}) {
  Environment environment = {{"LD_LIBRARY_PATH", VRAMSPILL_TEST_SIMCUDA_DIR},
                             {"LD_PRELOAD", kUnset},
                             {"VRAMSPILL_CONFIG", kUnset},
                             {"VRAMSPILL_DEVICE_BUDGET", kUnset},
                             {"VRAMSPILL_DEVICE_RESERVE", kUnset},
                             {"VRAMSPILL_SPILL_MODE", kUnset},
                             {"VRAMSPILL_LOG_LEVEL", kUnset},
                             {"VRAMSPILL_LOG_FILE", kUnset},
                             {"VRAMSPILL_LOG_SUMMARY", kUnset},
                             {"SIMCUDA_VRAM", "1GiB"},
                             {"SIMCUDA_DEVICES", "1"},
                             {"SIMCUDA_FAIL", kUnset}};
  for (const auto& [name, value] : extra) environment[name] = value;
  return environment;
}

Environment without_shim(const Environment& extra = {}) { return base_environment(extra); }

Environment with_shim(const Environment& extra = {},
                      const std::string& preload = VRAMSPILL_TEST_PRELOAD) {
  Environment environment = base_environment(extra);
  environment["LD_PRELOAD"] = preload;
  return environment;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The object a lookup of `puts` from the executable finds first: ASan's interceptor when the
// runtime is preloaded (sanitizer builds), else the C library.
std::string puts_provider() {
  const std::string asan_runtime = VRAMSPILL_TEST_ASAN_RUNTIME;
  return asan_runtime.empty() ? "libc.so.6" : asan_runtime.substr(asan_runtime.rfind('/') + 1);
}

// The LD_PRELOAD value that puts `library` where the shim would be: after the ASan runtime in
// sanitizer builds.
std::string preload_alone(const std::string& library) {
  const std::string asan_runtime = VRAMSPILL_TEST_ASAN_RUNTIME;
  return asan_runtime.empty() ? library : asan_runtime + ":" + library;
}

int count_of(const std::string& text, const std::string& part) {
  int count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// --- (a) Processes that never load the driver ----------------------------------------------------

struct ForeignCommand {
  std::vector<std::string> argv;
  int exit_code;
};

std::vector<ForeignCommand> foreign_commands() {
  return {{{"/bin/true"}, 0},
          {{"/bin/sh", "-c", "echo hi; echo to-stderr >&2; exit 3"}, 3},
          {{LIFECYCLE_PYTHON, "-c", "import sys; print(sys.argv); sys.exit(5)"}, 5},
          // The interpreter loads many shared libraries and calls dlsym itself.
          {{LIFECYCLE_PYTHON, "-c",
            "import ctypes, sys; libc = ctypes.CDLL(None); print(libc.getpid() > 0); "
            "sys.stderr.write('err\\n'); sys.exit(4)"},
           4}};
}

// The reference run for a foreign program, and the settings every foreign run gets (see the
// top of this file for sanitizer builds).
Environment foreign_settings(Environment extra = {}) {
  if (kSanitized) extra["ASAN_OPTIONS"] = "detect_leaks=0";
  return extra;
}

Environment foreign_baseline() {
  const std::string asan_runtime = VRAMSPILL_TEST_ASAN_RUNTIME;
  Environment settings = foreign_settings();
  if (!asan_runtime.empty()) settings["LD_PRELOAD"] = asan_runtime;
  return without_shim(settings);
}

void expect_unaffected(const Environment& shim_settings) {
  for (const ForeignCommand& command : foreign_commands()) {
    SCOPED_TRACE(command.argv.back());
    const RunResult plain = run_program(command.argv, foreign_baseline());
    const RunResult preloaded =
        run_program(command.argv, with_shim(foreign_settings(shim_settings)));
    ASSERT_TRUE(plain.exited(command.exit_code)) << plain.describe();
    EXPECT_TRUE(preloaded.exited(command.exit_code)) << preloaded.describe();
    EXPECT_EQ(preloaded.out, plain.out);
    EXPECT_EQ(preloaded.err, plain.err);
    EXPECT_FALSE(contains(preloaded.err, "[vramspill]")) << preloaded.err;
  }
}

TEST(ProcessWithoutDriver, ForeignProgramsRunAsWithoutTheShim) {
  // The most talkative settings: anything the shim did at load time would show.
  expect_unaffected({{"VRAMSPILL_LOG_LEVEL", "trace"}, {"VRAMSPILL_DEVICE_BUDGET", "64MiB"}});
}

TEST(ProcessWithoutDriver, ForeignProgramsIgnoreABadConfiguration) {
  // The configuration is read on the first hooked call, so a process that makes none never
  // reports it, however broken.
  expect_unaffected({{"VRAMSPILL_CONFIG", "/nonexistent/vramspill.toml"},
                     {"VRAMSPILL_DEVICE_BUDGET", "lots"},
                     {"VRAMSPILL_LOG_LEVEL", "trace"}});
}

TEST(ProcessWithoutDriver, ShimNeverLoadsTheDriver) {
  const RunResult plain = run_program({LIFECYCLE_NO_LIBCUDA_PROGRAM}, without_shim());
  const RunResult preloaded =
      run_program({LIFECYCLE_NO_LIBCUDA_PROGRAM}, with_shim({{"VRAMSPILL_LOG_LEVEL", "trace"}}));
  ASSERT_TRUE(plain.exited(7)) << plain.describe();
  ASSERT_TRUE(preloaded.exited(7)) << preloaded.describe();
  EXPECT_EQ(plain.out,
            "dlsym(RTLD_DEFAULT, \"cuMemAlloc_v2\"): null\n"
            "libcuda mapped: no\n");
  // The shim's own exports, called with no driver loaded, answer as for a driver function that
  // does not exist (CUDA_ERROR_NOT_FOUND = 500) and load nothing. A global-scope lookup of a
  // driver name finds nothing, as without the shim.
  EXPECT_EQ(preloaded.out,
            "dlsym(RTLD_DEFAULT, \"cuMemAlloc_v2\"): null\n"
            "shim cuInit: 500\n"
            "shim cuMemAlloc_v2: 500\n"
            "shim cuMemGetInfo_v2: 500\n"
            "shim cuGetProcAddress_v2: 500\n"
            "libcuda mapped: no\n")
      << preloaded.describe();
  EXPECT_FALSE(contains(preloaded.err, "[vramspill]")) << preloaded.err;
}

// --- (b) Hooks first called from another library's constructor ---------------------------------

TEST(LibraryConstructor, AllocationsBeforeMainAreBudgeted) {
  const RunResult plain = run_program({LIFECYCLE_CTOR_ALLOC_PROGRAM}, without_shim());
  ASSERT_TRUE(plain.exited(0)) << plain.describe();
  EXPECT_EQ(plain.out,
            "constructor: init=0 small=0 big=0 small_free=0 free_with_small_mib=1008 "
            "total_mib=1024\n"
            "main: alloc=0 free_mib=992\n");

  const RunResult preloaded =
      run_program({LIFECYCLE_CTOR_ALLOC_PROGRAM},
                  with_shim({{"VRAMSPILL_DEVICE_BUDGET", "64MiB"}, {"VRAMSPILL_SPILL_MODE", "off"}}));
  ASSERT_TRUE(preloaded.exited(0)) << preloaded.describe();
  // 128 MiB do not fit in 64 MiB: refused with CUDA_ERROR_OUT_OF_MEMORY (2); cuMemGetInfo
  // shows the budget; main() then runs under the same shim state.
  EXPECT_EQ(preloaded.out,
            "constructor: init=0 small=0 big=2 small_free=0 free_with_small_mib=48 "
            "total_mib=64\n"
            "main: alloc=0 free_mib=32\n")
      << preloaded.describe();
  EXPECT_TRUE(contains(preloaded.err, "refused")) << preloaded.err;
  EXPECT_EQ(count_of(preloaded.err, "device 0: peak"), 1) << preloaded.err;
}

// --- (c) Many threads ----------------------------------------------------------------------------

TEST(ManyThreads, BudgetHoldsAndEverythingIsReturned) {
  const RunResult result =
      run_program({LIFECYCLE_THREADS_PROGRAM, "64"},
                  with_shim({{"VRAMSPILL_DEVICE_BUDGET", "64MiB"},
                             {"VRAMSPILL_SPILL_MODE", "off"},
                             // the refusals are expected; the rate limiter keeps them short
                             {"VRAMSPILL_LOG_LEVEL", "warn"}}));
  EXPECT_TRUE(result.exited(0)) << result.describe();
  std::cout << result.out;
  EXPECT_TRUE(contains(result.err, "device 0: peak")) << result.err;
}

// --- (d) After fork ------------------------------------------------------------------------------

// No leak check in this program under AddressSanitizer: GCC 12's runtime does not lock its
// allocator across fork(), so when another thread (simcuda's workers, the shim's stats thread)
// holds that lock at the fork, the child's leak check at exit waits for it forever (seen under
// load: 4 hangs in 25 runs, in __lsan::LockAllocator). Elsewhere the option is ignored.
TEST(AfterFork, ChildIsPassThroughAndWritesNoSummary) {
  const RunResult result = run_program(
      {LIFECYCLE_FORK_PROGRAM},
      with_shim({{"VRAMSPILL_DEVICE_BUDGET", "64MiB"},
                 {"VRAMSPILL_SPILL_MODE", "off"},
                 {"ASAN_OPTIONS", "detect_leaks=0"}}));
  ASSERT_TRUE(result.exited(0)) << result.describe();
  const std::vector<std::string> lines = lines_of(result.out);
  ASSERT_GE(lines.size(), 3u) << result.describe();
  EXPECT_EQ(lines[0], "parent: over_budget_alloc=2 free_mib=16 total_mib=64");
  const auto child = std::find_if(lines.begin(), lines.end(), [](const std::string& line) {
    return line.rfind("child: hooked_alloc=", 0) == 0;
  });
  ASSERT_NE(child, lines.end()) << result.describe();
  // Whatever the driver answers a forked child, the hook answers the same; the shim refuses
  // nothing over the parent's budget and shows the driver's own figures.
  int hooked = -1, direct = -1, hooked_info = -1, driver_info = -1;
  size_t hooked_total = 0, driver_total = 0;
  char same_free[8] = {};
  ASSERT_EQ(std::sscanf(child->c_str(),
                        "child: hooked_alloc=%d driver_alloc=%d hooked_info=%d driver_info=%d "
                        "hooked_total_mib=%zu driver_total_mib=%zu same_free=%7s",
                        &hooked, &direct, &hooked_info, &driver_info, &hooked_total, &driver_total,
                        same_free),
            7)
      << *child;
  EXPECT_EQ(hooked, direct) << *child;
  EXPECT_EQ(hooked, 0) << "simcuda serves a forked child; the shim must not refuse: " << *child;
  EXPECT_EQ(hooked_info, driver_info) << *child;
  EXPECT_EQ(hooked_total, driver_total) << *child;
  EXPECT_EQ(hooked_total, 1024u) << *child;
  EXPECT_STREQ(same_free, "yes") << *child;
  EXPECT_NE(std::find(lines.begin(), lines.end(), "parent: child_exit=0"), lines.end())
      << result.describe();
  EXPECT_NE(std::find(lines.begin(), lines.end(), "parent: after_free_mib=64"), lines.end())
      << result.describe();
  // One summary: the parent's. The parent's refusal is logged; the child's allocation is not.
  EXPECT_EQ(count_of(result.err, "device 0: peak"), 1) << result.err;
  EXPECT_EQ(count_of(result.err, "[vramspill] warning:"), 1) << result.err;
  EXPECT_TRUE(contains(result.err, "refused")) << result.err;
}

// --- (f) The last release of a primary context at exit ---------------------------------------------

// Note [The last release of a primary context] in shim/hooks/device_reset.h: a release once the
// process exits (a runtime's teardown) goes to the driver as it is. The shim's books no longer
// matter then; resetting them would wait for the device and log what went after the summary.
TEST(AtExit, TheLastReleaseOfAPrimaryContextGoesToTheDriverAsItIs) {
  const RunResult result = run_program({LIFECYCLE_EXIT_RELEASE_PROGRAM},
                                       with_shim({{"VRAMSPILL_DEVICE_BUDGET", "64MiB"}}));
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "synchronized=0\nreleased=0\n") << result.describe();
  EXPECT_EQ(count_of(result.err, "device 0: peak"), 1) << result.err;
  EXPECT_FALSE(contains(result.err, "was reset")) << result.err;
}

// Note [Stream-ordered frees on the shim's thread] in shim/tiers/stream_ordered_frees.h: at exit
// the shim waits for a free in progress only until the last words' deadline. This one waits for
// a device that never comes free; the exit waited for it for good before.
TEST(AtExit, AFreeThatWaitsForTheDeviceDoesNotHoldTheExit) {
  const RunResult result = run_program({LIFECYCLE_EXIT_BUSY_DEVICE_PROGRAM},
                                       with_shim({{"VRAMSPILL_DEVICE_BUDGET", "8MiB"},
                                                  {"VRAMSPILL_SPILL_MODE", "managed"},
                                                  {"VRAMSPILL_LOG_LEVEL", "info"}}),
                                       /*timeout_seconds=*/30);
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "exiting\n") << result.describe();
  EXPECT_TRUE(contains(result.err, "spilled")) << "the premise: the request was spilled\n"
                                               << result.err;
}

// --- (e) dlsym: RTLD_NEXT relative to the caller, both symbol versions ---------------------------

TEST(Dlsym, RtldNextFromAnotherPreloadedLibraryIsRelativeToIt) {
  const std::string probe = LIFECYCLE_NEXT_PROBE;
  const std::string expected =
      "getpid matches the kernel: yes\n"
      "probe getpid: calls=1 recursions=0 next=libc.so.6\n"
      "probe cuserid: calls=1 recursions=0 next=libc.so.6\n"
      "RTLD_NEXT puts: " +
      puts_provider() +
      "\n"
      "RTLD_DEFAULT puts: " +
      puts_provider() +
      "\n"
      "RTLD_NEXT getpid: libvramspill_next_probe.so\n";
  // The probe alone, as the reference.
  const RunResult plain = run_program({LIFECYCLE_RTLD_NEXT_PROGRAM},
                                      without_shim({{"LD_PRELOAD", preload_alone(probe)}}));
  ASSERT_TRUE(plain.exited(0)) << plain.describe();
  EXPECT_EQ(plain.out, expected);
  // The shim first, the probe after it: the probe's first dlsym call is also the process's.
  const RunResult preloaded =
      run_program({LIFECYCLE_RTLD_NEXT_PROGRAM},
                  with_shim({}, std::string(VRAMSPILL_TEST_PRELOAD) + ":" + probe));
  EXPECT_TRUE(preloaded.exited(0)) << preloaded.describe();
  EXPECT_EQ(preloaded.out, expected) << preloaded.describe();
}

TEST(Dlsym, ProgramsBoundToTheOldVersionGetTheHooks) {
  // The program really is bound to dlsym@GLIBC_2.2.5.
  const ElfFile program(LIFECYCLE_OLD_DLSYM_PROGRAM);
  bool old_binding = false;
  for (const auto& symbol : program.dynamic_symbols())
    if (symbol.name == "dlsym" && !symbol.defined && symbol.version == "GLIBC_2.2.5")
      old_binding = true;
  ASSERT_TRUE(old_binding) << "old_dlsym_program does not reference dlsym@GLIBC_2.2.5";

  const RunResult plain = run_program({LIFECYCLE_OLD_DLSYM_PROGRAM}, without_shim());
  ASSERT_TRUE(plain.exited(0)) << plain.describe();
  EXPECT_TRUE(contains(plain.out, "dlsym_old is libc.so.6\n")) << plain.out;
  EXPECT_TRUE(contains(plain.out, "cuMemAlloc_v2: old=libcuda.so.1 new=libcuda.so.1 same=yes\n"))
      << plain.out;

  const RunResult preloaded = run_program({LIFECYCLE_OLD_DLSYM_PROGRAM}, with_shim());
  ASSERT_TRUE(preloaded.exited(0)) << preloaded.describe();
  EXPECT_EQ(preloaded.out,
            "dlsym_old is libvramspill.so\n"
            "cuMemAlloc_v2: old=libvramspill.so new=libvramspill.so same=yes\n"
            "cuGetProcAddress_v2: old=libvramspill.so new=libvramspill.so same=yes\n"
            "cuLaunchKernel: old=libvramspill.so new=libvramspill.so same=yes\n"
            "cuInit: old=libvramspill.so new=libvramspill.so same=yes\n"
            // Not hooked: the driver's own, under either version.
            "cuDeviceGet: old=libcuda.so.1 new=libcuda.so.1 same=yes\n"
            // The 32-bit ABI's export, hooked with that ABI.
            "cuMemAlloc: old=libvramspill.so new=libvramspill.so same=yes\n"
            "old RTLD_NEXT puts: " +
                puts_provider() + "\n")
      << preloaded.describe();
}

}  // namespace
