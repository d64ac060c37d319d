// A real job that SIGINT or SIGTERM ends (Note [A signal that ends the job] in
// shim/hooks/ending_signals.h): stats_job_program under the shim on simcuda, run directly and
// under `vramspill run`, must end by the signal as without the shim, having written its exit
// summary, removed its stats file and ended its trace; a program with a handler of its own keeps
// it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "running_job.h"
#include "subprocess.h"

namespace {

namespace fs = std::filesystem;

// For an AddressSanitizer build of what runs under `vramspill run`: the shim comes first in
// LD_PRELOAD, ahead of the sanitizer's runtime, which is told not to mind; and LeakSanitizer,
// which cannot stop the world from the first process of a PID namespace (it fails fatally at
// exit there), is left out.
constexpr const char* kAsanOptionsUnderRun = "verify_asan_link_order=0:detect_leaks=0";
using vramspill::testing::contains;
using vramspill::testing::Environment;
using vramspill::testing::has_figures;
using vramspill::testing::Job;
using vramspill::testing::job_environment;
using vramspill::testing::RunResult;
using vramspill::testing::StatsJobTest;
using vramspill::testing::wait_for_entry;

constexpr const char* kSummary = "[vramspill] info: device 0: peak 32.0 MiB of 32.0 MiB budget";

class EndingSignalTest : public StatsJobTest {
 protected:
  // The job (three 16 MiB blocks over a 32 MiB budget: one spills), traced, once it has
  // published its figures; `command` goes before the program (`vramspill run --`). Its standard
  // error goes to `error_path`, error_file() by default.
  // `handler`: one of stats_job_program.cpp's options (--handle-sigterm, ...), or none.
  Job start(const std::vector<std::string>& command, const std::string& handler = {},
            const std::string& error_path = {}) {
    Environment environment = job_environment(runtime_.string());
    environment["VRAMSPILL_TRACE_FILE"] = trace_path();
    // `vramspill run` puts the shim first in LD_PRELOAD, ahead of an ASan build's runtime: that
    // build is told not to mind (as in cli_test.cpp).
    if (!command.empty()) environment["ASAN_OPTIONS"] = kAsanOptionsUnderRun;
    std::vector<std::string> argv = command;
    argv.push_back(STATS_JOB_PROGRAM);
    if (!handler.empty()) argv.push_back(handler);
    for (const char* size : {"16", "16", "16"}) argv.push_back(size);
    return Job(argv, environment, error_path.empty() ? error_file() : error_path);
  }
  // Sends SIGTERM and waits up to 20 s for the job to end; whether it did (if not, SIGKILL ends it,
  // and its status says so).
  static bool ends_after_sigterm(Job& job) {
    if (!job.signal(SIGTERM)) return false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (job.running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const bool ended = !job.running();
    if (!ended) job.signal(SIGKILL);
    while (job.running()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return ended;
  }
  std::string trace_path() const { return (root_ / "job.trace").string(); }
  std::string last_line_of_trace() const {
    std::ifstream trace(trace_path());
    std::string line;
    std::string last;
    while (std::getline(trace, line)) last = line;
    return last;
  }

  // Ends the ready job with `signal`; how it ended.
  RunResult end_with(Job& job, int signal) {
    EXPECT_GT(job.pid(), 0);
    EXPECT_TRUE(job.wait_ready());
    stats_path_ = stats_file_of(job.pid());
    EXPECT_TRUE(wait_for_entry(stats_path_, job, has_figures).has_value());
    EXPECT_TRUE(job.signal(signal));
    // Standard input stays open until the job has ended: closing it would end the job's wait,
    // and the job could exit by itself before the signal ends it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (job.running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return job.finish();
  }

  void expect_last_words(const RunResult& result) {
    EXPECT_TRUE(contains(result.err, kSummary)) << result.describe();
    EXPECT_FALSE(fs::exists(stats_path_)) << "the stats file outlived its job";
    EXPECT_TRUE(last_line_of_trace().starts_with("# end ")) << last_line_of_trace();
  }

  std::string stats_path_;
};

TEST_F(EndingSignalTest, sigterm_ends_the_job_by_the_signal_after_its_last_words) {
  Job job = start({});
  const RunResult result = end_with(job, SIGTERM);
  EXPECT_EQ(result.signal, SIGTERM) << result.describe();
  expect_last_words(result);
}

TEST_F(EndingSignalTest, sigint_ends_the_job_by_the_signal_after_its_last_words) {
  Job job = start({});
  const RunResult result = end_with(job, SIGINT);
  EXPECT_EQ(result.signal, SIGINT) << result.describe();
  expect_last_words(result);
}

// `vramspill run` execs the command: the job is the process the signal reaches.
TEST_F(EndingSignalTest, under_vramspill_run_sigterm_leaves_the_same_last_words) {
  Job job = start({VRAMSPILL_CLI, "run", "--"});
  const RunResult result = end_with(job, SIGTERM);
  EXPECT_EQ(result.signal, SIGTERM) << result.describe();
  expect_last_words(result);
}

// util-linux's, where Debian and Ubuntu install it.
constexpr const char* kUnshare = "/usr/bin/unshare";

// Whether this machine lets a test start a process in a PID namespace of its own.
bool can_make_pid_namespaces() {
  const std::string probe = std::string(kUnshare) + " --fork --pid --mount-proc true >/dev/null 2>&1";
  return access(kUnshare, X_OK) == 0 && std::system(probe.c_str()) == 0;
}

// The first child of `pid`, read from /proc; 0 when it has none (yet).
pid_t first_child_of(pid_t pid) {
  std::ifstream children("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) +
                         "/children");
  pid_t child = 0;
  children >> child;
  return child;
}

// A container's command: `vramspill run` as the first process of its PID namespace, where the
// kernel would drop a SIGTERM sent to the job itself (Note [vramspill run as the first process]
// in tools/cli/init_process.h). run stays as init and passes the signal on: the job ends by it,
// after its last words, and run exits with the status a shell reports for that, 128 + 15.
TEST_F(EndingSignalTest, vramspill_run_as_the_first_process_passes_sigterm_on) {
  if (!can_make_pid_namespaces()) GTEST_SKIP() << "no PID namespaces here (unshare refused)";
  Job job = start({kUnshare, "--fork", "--pid", "--mount-proc", VRAMSPILL_CLI, "run", "--"});
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready());
  const pid_t first_process = first_child_of(job.pid());  // run, PID 1 inside
  ASSERT_GT(first_process, 0);
  ASSERT_EQ(kill(first_process, SIGTERM), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (job.running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool ended = !job.running();
  if (!ended) kill(first_process, SIGKILL);
  const RunResult result = job.finish();
  ASSERT_TRUE(ended) << "the job outlived the SIGTERM sent to its container by 20 s";
  EXPECT_TRUE(result.exited(128 + SIGTERM)) << result.describe();
  EXPECT_TRUE(contains(result.err, kSummary)) << result.describe();
  EXPECT_TRUE(last_line_of_trace().starts_with("# end ")) << last_line_of_trace();
}

// As init, run starts the command as exec would: a script without a #! line runs through
// /bin/sh (posix_spawnp no longer does that since glibc 2.29).
TEST_F(EndingSignalTest, vramspill_run_as_the_first_process_runs_a_script_without_an_interpreter) {
  if (!can_make_pid_namespaces()) GTEST_SKIP() << "no PID namespaces here (unshare refused)";
  const fs::path script = root_ / "no_interpreter_line";
  std::ofstream(script) << "echo ran by sh\n";
  fs::permissions(script, fs::perms::owner_all);
  const fs::path output = root_ / "output";
  const std::string command = "ASAN_OPTIONS=" + std::string(kAsanOptionsUnderRun) + " " +
                              kUnshare + " --fork --pid --mount-proc " + VRAMSPILL_CLI + " run -- " +
                              script.string() + " > " + output.string() + " 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0);
  std::ifstream printed(output);
  const std::string text{std::istreambuf_iterator<char>(printed), {}};
  EXPECT_TRUE(contains(text, "ran by sh")) << text;
}

// Last words that cannot be written do not keep the job alive: its standard error is a pipe
// nobody drains (a terminal that stopped scrolling, a log collector that hung), full before the
// signal comes, so the summary's write blocks; the job still ends by the signal, at the deadline.
TEST_F(EndingSignalTest, a_standard_error_nobody_drains_does_not_keep_the_job_alive) {
  const std::string pipe_path = (root_ / "stderr.fifo").string();
  ASSERT_EQ(mkfifo(pipe_path.c_str(), 0600), 0);
  const int reader = open(pipe_path.c_str(), O_RDONLY | O_NONBLOCK);  // never reads
  ASSERT_GE(reader, 0);
  Job job = start({}, /*handler=*/{}, pipe_path);
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready());
  const int filler = open(pipe_path.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_GE(filler, 0);
  const std::string block(4096, 'x');
  while (write(filler, block.data(), block.size()) > 0) {
  }
  ASSERT_EQ(errno, EAGAIN) << "the pipe is full";
  EXPECT_TRUE(ends_after_sigterm(job)) << "the job outlived its SIGTERM by 20 s";
  // finish() reads standard error back: a pipe would block it, a missing file reads empty.
  close(filler);
  close(reader);
  unlink(pipe_path.c_str());
  EXPECT_EQ(job.finish().signal, SIGTERM);
}

// The program's own handler decides: here it ends the wait, and the program exits normally.
TEST_F(EndingSignalTest, a_handler_of_the_programs_own_is_left_to_decide) {
  Job job = start({}, "--handle-sigterm");
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready());
  ASSERT_TRUE(job.signal(SIGTERM));
  EXPECT_TRUE(contains(job.wait_for_output("handled\n"), "handled\n"));
  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.err, kSummary)) << result.describe();
}

// Note [Waking the shim's thread] in shim/hooks/ending_signals.h: the program closed the shim's
// descriptors and opened eventfds of its own in their numbers. The handler must see that the one
// it wakes the shim's thread through is gone, and end the job by the signal at once; taking the
// program's eventfd for its own (every eventfd has the same inode), it woke nothing, and the job
// ran on after its SIGTERM.
TEST_F(EndingSignalTest, a_wake_up_descriptor_the_program_took_over_still_ends_the_job) {
  Job job = start({}, "--take-over-descriptors");
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready());
  EXPECT_TRUE(ends_after_sigterm(job)) << "the job outlived its SIGTERM by 20 s";
  EXPECT_EQ(job.finish().signal, SIGTERM);
}

// Note [A handler the program chains to ours] in shim/hooks/ending_signals.h: a handler the
// program set after the shim's, which calls the shim's, decides too: the program shuts down in
// its own time and exits normally (it was ended by SIGTERM in the middle of its shutdown before).
TEST_F(EndingSignalTest, a_handler_that_chains_to_the_shims_is_left_to_decide) {
  Job job = start({}, "--chain-sigterm");
  ASSERT_GT(job.pid(), 0);
  ASSERT_TRUE(job.wait_ready());
  ASSERT_TRUE(job.signal(SIGTERM));
  EXPECT_TRUE(contains(job.wait_for_output("drained\n"), "drained\n"));
  const RunResult result = job.finish();
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.err, kSummary)) << result.describe();
}

}  // namespace
