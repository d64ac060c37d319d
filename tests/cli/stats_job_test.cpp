// Stats of real jobs: stats_job_program runs under the shim on simcuda, publishing its figures
// (shim/hooks/stats_publisher.h), and this test damages its file or its filesystem the way
// others can, or runs it where its pid means nothing here, then checks what the job and
// `vramspill stat` make of it (Notes [Stats segment consistency] and [Stats liveness]).
// Mounting a tmpfs and entering new namespaces need root (or unprivileged user namespaces):
// those tests skip without.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "running_job.h"
#include "subprocess.h"
#include "stats_reader.h"

namespace {

namespace fs = std::filesystem;
using vramspill::telemetry::scan_stats_directory;
using vramspill::telemetry::StatsEntry;
using vramspill::telemetry::StatsSnapshot;
using vramspill::testing::contains;
using vramspill::testing::Environment;
using vramspill::testing::has_figures;
using vramspill::testing::Job;
using vramspill::testing::job_environment;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;
using vramspill::testing::StatsJobTest;
using vramspill::testing::wait_for_entry;

constexpr const char* kUnshare = "/usr/bin/unshare";

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

TEST_F(StatsJobTest, a_full_filesystem_turns_stats_off_and_the_job_runs_on) {
  // A 64 KiB tmpfs in a mount namespace of the job's own, filled before the job starts: the
  // stats directory can be created (it takes no blocks), its file cannot be written.
  const std::string mount_and_run =
      "mount -t tmpfs -o size=64k tmpfs \"$0\" || exit 99; "
      "dd if=/dev/zero of=\"$0/fill\" bs=4k 2>/dev/null; exec \"$@\"";
  const std::string runtime = runtime_.string();
  if (!fs::exists(kUnshare) ||
      !run_program({kUnshare, "-m", "--", "/bin/sh", "-c", mount_and_run, runtime, "/bin/true"},
                   {}, 30)
           .exited(0))
    GTEST_SKIP() << "cannot mount a tmpfs in a new mount namespace here (needs root)";

  const RunResult result =
      run_program({kUnshare, "-m", "--", "/bin/sh", "-c", mount_and_run, runtime,
                   STATS_JOB_PROGRAM, "8"},
                  job_environment(runtime), 60);
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(count_of(result.err, "stats are off"), 1U) << result.err;
  EXPECT_TRUE(contains(result.err, "No space left on device")) << result.err;
}

TEST_F(StatsJobTest, a_job_survives_its_file_being_truncated_and_writes_it_again) {
  Job job({STATS_JOB_PROGRAM, "8"}, job_environment(runtime_.string()), error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  const std::string path = stats_file_of(job.pid());
  const std::optional<StatsEntry> before = wait_for_entry(path, job, has_figures);
  ASSERT_TRUE(before.has_value()) << job.finish().describe();

  // Another process of the same user cuts the file to nothing.
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  const uint64_t count = before->snapshot.publish_count;
  const std::optional<StatsEntry> after = wait_for_entry(path, job, [&](const StatsEntry& entry) {
    return has_figures(entry) && entry.snapshot.publish_count > count;
  });
  EXPECT_TRUE(after.has_value()) << "the job did not write its file again";
  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_FALSE(fs::exists(path)) << "the file outlived its job";
}

TEST_F(StatsJobTest, stat_keeps_and_shows_a_job_of_another_pid_namespace) {
  if (!fs::exists(kUnshare) ||
      !run_program({kUnshare, "--pid", "--fork", "--mount-proc", "/bin/true"}, {}, 30).exited(0))
    GTEST_SKIP() << "cannot enter a new PID namespace here (needs root)";
  // The job is pid 1 of its namespace; here pid 1 is another process, started at another time.
  Environment environment = job_environment(runtime_.string());
  // LeakSanitizer cannot stop the world as the first process of a new PID namespace (it fails
  // fatally there); in sanitized builds this job runs without it.
  environment["ASAN_OPTIONS"] = "detect_leaks=0";
  Job job({kUnshare, "--pid", "--fork", "--mount-proc", STATS_JOB_PROGRAM, "8"}, environment,
          error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  const std::string path = stats_directory() + "/1.stats";
  ASSERT_TRUE(wait_for_entry(path, job, has_figures).has_value()) << job.finish().describe();

  const RunResult stat =
      run_program({VRAMSPILL_CLI, "stat", "--once", "--directory", stats_directory()}, {}, 60);
  EXPECT_TRUE(stat.exited(0)) << stat.describe();
  EXPECT_TRUE(contains(stat.out, "1 process under vramspill")) << stat.out;
  EXPECT_TRUE(contains(stat.out, "pid 1  ")) << stat.out;
  EXPECT_TRUE(fs::exists(path)) << "stat deleted a live job's file";

  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
}

TEST_F(StatsJobTest, stat_deletes_the_file_of_a_killed_job) {
  Job job({STATS_JOB_PROGRAM, "8"}, job_environment(runtime_.string()), error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  const std::string path = stats_file_of(job.pid());
  ASSERT_TRUE(wait_for_entry(path, job, has_figures).has_value()) << job.finish().describe();
  ASSERT_TRUE(job.signal(SIGKILL));
  EXPECT_EQ(job.finish().signal, SIGKILL);
  ASSERT_TRUE(fs::exists(path));

  const RunResult stat =
      run_program({VRAMSPILL_CLI, "stat", "--once", "--directory", stats_directory()}, {}, 60);
  EXPECT_TRUE(stat.exited(0)) << stat.describe();
  EXPECT_EQ(stat.out, "no processes under vramspill\n");
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(StatsJobTest, stat_skips_damaged_files_and_shows_the_live_job) {
  Job job({STATS_JOB_PROGRAM, "8"}, job_environment(runtime_.string()), error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  ASSERT_TRUE(wait_for_entry(stats_file_of(job.pid()), job, has_figures).has_value())
      << job.finish().describe();
  const std::string garbage = stats_directory() + "/7.stats";
  std::ofstream(garbage) << std::string(4096, 'x');
  const std::string cut = stats_directory() + "/8.stats";
  fs::copy_file(stats_file_of(job.pid()), cut);
  fs::resize_file(cut, 100);

  const RunResult stat =
      run_program({VRAMSPILL_CLI, "stat", "--once", "--directory", stats_directory()}, {}, 60);
  EXPECT_TRUE(stat.exited(0)) << stat.describe();
  EXPECT_TRUE(contains(stat.out, "1 process under vramspill")) << stat.out;
  EXPECT_TRUE(contains(stat.out, "pid " + std::to_string(job.pid()) + "  ")) << stat.out;
  EXPECT_TRUE(contains(stat.err, "skipping " + garbage)) << stat.err;
  EXPECT_TRUE(contains(stat.err, "skipping " + cut)) << stat.err;
  EXPECT_TRUE(job.finish().exited(0));
}

TEST_F(StatsJobTest, spilled_allocations_are_not_counted_as_refused) {
  // 16 + 16 MiB fill the 32 MiB budget; the third block spills.
  Job job({STATS_JOB_PROGRAM, "16", "16", "16"}, job_environment(runtime_.string()),
          error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  const std::optional<StatsEntry> entry =
      wait_for_entry(stats_file_of(job.pid()), job, [](const StatsEntry& read) {
        return has_figures(read) && read.snapshot.devices[0].spills >= 1;
      });
  ASSERT_TRUE(entry.has_value()) << job.finish().describe();
  const auto& device = entry->snapshot.devices[0];
  EXPECT_EQ(device.spills, 1U);
  EXPECT_EQ(device.refused, 0U) << "a spilled allocation counted as refused";
  EXPECT_EQ(device.device_bytes, 32ULL << 20);
  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
}

// Tiered blocks show in `vramspill stat` whichever mover ([tiered] mover, the parameter) holds
// them: three 16 MiB blocks under a 32 MiB budget, two on the device and one on the host.
class TieredStatsJobTest : public StatsJobTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(TieredStatsJobTest, stat_shows_where_the_tiered_blocks_are) {
  Environment environment = job_environment(runtime_.string());
  environment["VRAMSPILL_SPILL_MODE"] = "tiered";
  environment["VRAMSPILL_TIERED_MOVER"] = GetParam();
  Job job({STATS_JOB_PROGRAM, "16", "16", "16"}, environment, error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  const std::optional<StatsEntry> entry =
      wait_for_entry(stats_file_of(job.pid()), job, [](const StatsEntry& read) {
        return has_figures(read) && read.snapshot.devices[0].tiered_host_bytes != 0;
      });
  ASSERT_TRUE(entry.has_value()) << job.finish().describe();
  EXPECT_EQ(entry->snapshot.devices[0].tiered_device_bytes, 32ULL << 20);
  EXPECT_EQ(entry->snapshot.devices[0].tiered_host_bytes, 16ULL << 20);
  const RunResult stat =
      run_program({VRAMSPILL_CLI, "stat", "--once", "--directory", stats_directory()}, {}, 60);
  EXPECT_TRUE(contains(stat.out, "dev 0 tiered blocks: 32.0 MiB on the device, 16.0 MiB on the "
                                 "host"))
      << stat.out;
  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
}

INSTANTIATE_TEST_SUITE_P(Movers, TieredStatsJobTest, ::testing::Values("remap", "prefetch"));

// README: the file is the running job's, "removed at exit".
TEST_F(StatsJobTest, a_job_removes_its_file_at_exit) {
  Job job({STATS_JOB_PROGRAM, "16"}, job_environment(runtime_.string()), error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  const std::string path = stats_file_of(job.pid());
  ASSERT_TRUE(wait_for_entry(path, job, has_figures).has_value()) << job.finish().describe();
  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_FALSE(fs::exists(path)) << "the stats file outlived its job";
}

// log.stats = false: the job runs and publishes nothing.
TEST_F(StatsJobTest, log_stats_false_publishes_no_file) {
  Environment environment = job_environment(runtime_.string());
  environment["VRAMSPILL_LOG_STATS"] = "false";
  Job job({STATS_JOB_PROGRAM, "16", "16", "16"}, environment, error_file());
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready()) << job.finish().describe();
  // The first publish comes with the first driver call, which "ready" follows.
  EXPECT_FALSE(fs::exists(stats_file_of(job.pid())));
  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(!fs::exists(stats_directory()) || fs::is_empty(stats_directory()));
}

}  // namespace
