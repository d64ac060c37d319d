// Real jobs under the shim on simcuda for the tests of the stats files and the commands that read
// them (stats_job_test.cpp, exporter_job_test.cpp): stats_job_program run in the background with
// a budget it overflows, and a fixture giving each test its own stats directory.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"
#include "stats_reader.h"

namespace vramspill::testing {

using telemetry::read_stats_file;
using telemetry::StatsEntry;
using telemetry::StatsState;

inline constexpr auto kPatience = std::chrono::seconds(20);

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// simcuda with 64 MiB and a 32 MiB budget (so that a third 16 MiB block spills), the shim
// preloaded, stats in `runtime_directory`/vramspill; none of the caller's shim or simcuda
// settings.
inline Environment job_environment(const std::string& runtime_directory) {
  Environment environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (text.starts_with("VRAMSPILL_") || text.starts_with("SIMCUDA_"))
      environment[text.substr(0, text.find('='))] = kUnset;
  }
  environment["LD_LIBRARY_PATH"] = VRAMSPILL_TEST_SIMCUDA_DIR;
  environment["LD_PRELOAD"] = VRAMSPILL_TEST_PRELOAD;
  environment["SIMCUDA_VRAM"] = "64MiB";
  environment["SIMCUDA_DEVICES"] = "1";
  environment["VRAMSPILL_DEVICE_BUDGET"] = "32MiB";
  environment["VRAMSPILL_SPILL_HOST_LIMIT"] = "512MiB";
  environment["VRAMSPILL_SPILL_HOST_POOL_STEP"] = "64MiB";
  environment["XDG_RUNTIME_DIR"] = runtime_directory;
  return environment;
}

// A job running in the background: its standard input is a pipe (closing it ends the job), its
// standard output a pipe ("ready" once it has allocated), its standard error a file.
class Job {
 public:
  Job(std::vector<std::string> argv, const Environment& environment, std::string error_file)
      : error_file_(std::move(error_file)) {
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, error_file_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<std::string> variables = make_environment(environment);
    std::vector<char*> env_pointers;
    for (std::string& variable : variables) env_pointers.push_back(variable.data());
    env_pointers.push_back(nullptr);
    std::vector<char*> arg_pointers;
    for (std::string& argument : argv) arg_pointers.push_back(argument.data());
    arg_pointers.push_back(nullptr);
    if (posix_spawn(&pid_, arg_pointers[0], &actions, nullptr, arg_pointers.data(),
                    env_pointers.data()) != 0)
      pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  ~Job() {
    if (pid_ > 0 && !ended_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) close(stdin_);
    if (stdout_ >= 0) close(stdout_);
  }

  pid_t pid() const { return pid_; }

  // Sends `signal` to the job while it runs; false once it has been reaped, or never started.
  // Never kill(pid(), ...): pid() is -1 then, and kill(-1, ...) signals every process the user
  // may signal, the test runner and its shell among them.
  bool signal(int signal) {
    return pid_ > 0 && !ended_ && kill(pid_, signal) == 0;
  }

  // Whether the job printed "ready" (it has allocated its blocks).
  bool wait_ready() { return contains(wait_for_output("ready\n"), "ready\n"); }

  // What it printed until `wanted`, or until it closed its standard output or the wait took too
  // long (then without `wanted`).
  std::string wait_for_output(const std::string& wanted) {
    std::string seen;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!contains(seen, wanted) && std::chrono::steady_clock::now() < deadline) {
      pollfd ready{stdout_, POLLIN, 0};
      if (poll(&ready, 1, 100) <= 0) continue;
      char buffer[256];
      const ssize_t got = read(stdout_, buffer, sizeof buffer);
      if (got <= 0) break;
      seen.append(buffer, static_cast<std::size_t>(got));
    }
    return seen;
  }

  // Whether it still runs (reaped here when not; finish() reports how it ended).
  bool running() {
    if (pid_ > 0 && !ended_ && waitpid(pid_, &status_, WNOHANG) == pid_) ended_ = true;
    return pid_ > 0 && !ended_;
  }

  // Closes its standard input and waits for it; its exit status or signal, and standard error.
  RunResult finish() {
    close(stdin_);
    stdin_ = -1;
    RunResult result;
    if (pid_ > 0 && !ended_ && waitpid(pid_, &status_, 0) == pid_) ended_ = true;
    if (ended_ && WIFEXITED(status_)) result.exit_code = WEXITSTATUS(status_);
    if (ended_ && WIFSIGNALED(status_)) result.signal = WTERMSIG(status_);
    pid_ = -1;
    std::stringstream error;
    error << std::ifstream(error_file_).rdbuf();
    result.err = error.str();
    return result;
  }

 private:
  std::string error_file_;
  pid_t pid_ = -1;
  bool ended_ = false;
  int status_ = 0;
  int stdin_ = -1;
  int stdout_ = -1;
};

// Reads `path` until `wanted` holds of its entry, while `job` runs; the last entry read, or
// nullopt when the job ended or the wait took too long.
inline std::optional<StatsEntry> wait_for_entry(
    const std::string& path, Job& job, const std::function<bool(const StatsEntry&)>& wanted) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (job.running() && std::chrono::steady_clock::now() < deadline) {
    StatsEntry entry = read_stats_file(path);
    if (wanted(entry)) return entry;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // publishes come every 0.5 s
  }
  return std::nullopt;
}

// A publish with figures (after the first driver call's), read back whole.
inline bool has_figures(const StatsEntry& entry) {
  return (entry.state == StatsState::kLive || entry.state == StatsState::kStale) &&
         entry.snapshot.publish_count >= 1 && !entry.snapshot.devices.empty();
}

class StatsJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vramspill-stats-job-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    runtime_ = root_ / "xdg";
    ASSERT_TRUE(std::filesystem::create_directory(runtime_));
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  std::string stats_directory() const { return (runtime_ / "vramspill").string(); }
  std::string stats_file_of(pid_t pid) const {
    return stats_directory() + "/" + std::to_string(pid) + ".stats";
  }
  std::string error_file() const { return (root_ / "stderr").string(); }

  std::filesystem::path root_;
  std::filesystem::path runtime_;
};

}  // namespace vramspill::testing
