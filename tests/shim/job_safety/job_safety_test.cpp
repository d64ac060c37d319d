// The shim must never be what stops or corrupts its job: runs job_safety_program under the shim
// on simcuda (64 MiB of VRAM, one device) with standard error closed, with policy and log files
// that are not regular files, and with budgets that leave nothing to allocate.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "job_safety_fixture.h"

namespace {

using vramspill::testing::contains;
using vramspill::testing::JobSafety;
using vramspill::testing::kSpillingJob;
using vramspill::testing::RunResult;

// --- Note [The shim's own descriptors] ----------------------------------------------------------

TEST_F(JobSafety, LogNeverReachesAFileTheJobOpensAsDescriptor2) {
  // Opened after the shim started, and before it: close-on-exec (Note [The shim's own
  // descriptors]).
  for (const char* mode : {"closed-stderr-file", "stderr-taken-before-the-shim"}) {
    const std::string path = (root_ / "program-output").string();
    const RunResult result = run({mode, path}, kSpillingJob, true);
    ASSERT_TRUE(result.exited(0)) << mode << ": " << result.describe();
    EXPECT_TRUE(contains(result.out, "descriptor 2 is " + path)) << result.out;
    std::ifstream in(path, std::ios::binary);
    std::stringstream written;
    written << in.rdbuf();
    EXPECT_EQ(written.str(), "") << mode << ": the shim wrote into the job's file";
  }
}

TEST_F(JobSafety, LogNeverReachesDeviceMemoryOnDescriptor2) {
  const RunResult result = run({"closed-stderr-device"}, kSpillingJob, true);
  // The program checks every byte of every block.
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.out, "descriptor 2 is /memfd:simcuda")) << result.out;
}

// The same job with standard error open logs there: the tests above fail for the right reason.
TEST_F(JobSafety, LogGoesToTheStandardErrorTheJobStartedWith) {
  const RunResult result = run({"spill"}, kSpillingJob);
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.err, "[vramspill] info: cuMemAlloc of 4.0 MiB on device 0 spilled"))
      << result.err;
  EXPECT_TRUE(contains(result.err, "[vramspill] info: device 0: peak 8.0 MiB of 8.0 MiB"))
      << result.err;
}

// Note [A full pipe never holds the job]: the job's standard error is a pipe that is full and that
// nobody reads until the job ends. The shim's lines (spills at info, the exit summary) do not
// fit; the job ends all the same (it was killed at the time-out before).
TEST_F(JobSafety, AFullStandardErrorNeverHoldsTheJob) {
  const RunResult result = run({"full-stderr-pipe"}, kSpillingJob);
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "spilled with standard error full\n") << result.describe();
}

// --- Note [Only regular files]: the policy -----------------------------------------------------

// Each is refused without blocking or reading without end, and cuInit fails (1,
// CUDA_ERROR_INVALID_VALUE) as for any invalid configuration.
TEST_F(JobSafety, PolicyThatIsNotARegularFileFailsCuInit) {
  const std::string fifo = make_fifo("job.toml");
  const std::string directory = root_.string();
  for (const auto& [path, what] : std::vector<std::pair<std::string, std::string>>{
           {fifo, "a pipe"}, {"/dev/zero", "a character device"}, {directory, "a directory"}}) {
    const RunResult result = run({"init"}, {{"VRAMSPILL_CONFIG", path}});
    ASSERT_TRUE(result.exited(0)) << path << ": " << result.describe();
    EXPECT_EQ(result.out, "cuInit(0) = 1\n") << path;
    EXPECT_TRUE(contains(result.err, "[vramspill] error: invalid configuration")) << result.err;
    EXPECT_TRUE(contains(result.err, "cannot read the config file '" + path +
                                         "' (VRAMSPILL_CONFIG): it is " + what +
                                         ", not a regular file"))
        << result.err;
  }
}

TEST_F(JobSafety, PolicyOverTheSizeLimitFailsCuInit) {
  const std::string path = (root_ / "big.toml").string();
  std::ofstream(path) << "[log]\nlevel = \"info\"\n" << std::string(size_t{1} << 20, '#') << "\n";
  const RunResult result = run({"init"}, {{"VRAMSPILL_CONFIG", path}});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "cuInit(0) = 1\n");
  EXPECT_TRUE(contains(result.err, "cannot read the config file '" + path +
                                       "' (VRAMSPILL_CONFIG): it is larger than 1 MiB"))
      << result.err;
}

// --- Note [Only regular files]: [log] file -----------------------------------------------------

// A named pipe nobody reads would block the job's first driver call: it is refused with a
// warning, and the log goes to standard error.
TEST_F(JobSafety, LogFileThatIsANamedPipeFallsBackToStderr) {
  const std::string fifo = make_fifo("vramspill.log");
  const RunResult result = run({"init"}, {{"VRAMSPILL_LOG_FILE", fifo}});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "cuInit(0) = 0\n");
  EXPECT_TRUE(contains(result.err, "[vramspill] warning: cannot open log file '" + fifo +
                                       "' (it is a pipe, not a regular file); logging to "
                                       "standard error"))
      << result.err;
}

// --- Note [A budget that leaves nothing] -------------------------------------------------------

TEST_F(JobSafety, PercentBudgetThatTheReserveSwallowsFailsCuInit) {
  const RunResult result =
      run({"init"}, {{"VRAMSPILL_DEVICE_BUDGET", "50%"}, {"VRAMSPILL_DEVICE_RESERVE", "40MiB"}});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "cuInit(0) = 1\n");
  EXPECT_TRUE(
      contains(result.err,
               "[vramspill] error: invalid configuration for device 0, CUDA initialisation fails: "
               "device.budget = 50% of the device's 64.0 MiB (67108864 bytes) is 32.0 MiB, and "
               "device.reserve = 40.0 MiB is kept free below it: nothing is left to allocate"))
      << result.err;
}

TEST_F(JobSafety, SizeBudgetAboveTheDeviceThatTheReserveSwallowsFailsCuInit) {
  const RunResult result =
      run({"init"}, {{"VRAMSPILL_DEVICE_BUDGET", "1GiB"}, {"VRAMSPILL_DEVICE_RESERVE", "64MiB"}});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "cuInit(0) = 1\n");
  EXPECT_TRUE(contains(result.err,
                       "device.budget = 1.0 GiB is capped at the device's 64.0 MiB (67108864 "
                       "bytes), and device.reserve = 64.0 MiB is kept free below it: nothing is "
                       "left to allocate"))
      << result.err;
}

// The control: a reserve that leaves room initialises.
TEST_F(JobSafety, PercentBudgetWithRoomLeftInitialises) {
  const RunResult result =
      run({"init"}, {{"VRAMSPILL_DEVICE_BUDGET", "50%"}, {"VRAMSPILL_DEVICE_RESERVE", "16MiB"}});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "cuInit(0) = 0\n");
  EXPECT_FALSE(contains(result.err, "[vramspill] error")) << result.err;
}

}  // namespace
