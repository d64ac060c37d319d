// The vramspill command, run as a program: `run` checks the policy, sets the environment and
// execs; `stat` finds the processes under the shim from their stats files; the help texts.
// The stats files `stat` reads are written by this test process itself, with the shim's writer.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "subprocess.h"
#include "telemetry/stats_file.h"

namespace {

namespace fs = std::filesystem;
using vramspill::telemetry::DeviceFigures;
using vramspill::telemetry::StatsFile;
using vramspill::testing::Environment;
using vramspill::testing::kUnset;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;

// The environment of every run: none of the caller's shim settings, nothing preloaded.
Environment clean(const Environment& extra = {}) {
  Environment environment = {{"LD_PRELOAD", kUnset}, {"VRAMSPILL_LIBRARY", kUnset}};
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (text.starts_with("VRAMSPILL_")) environment[text.substr(0, text.find('='))] = kUnset;
  }
  for (const auto& [name, value] : extra) environment[name] = value;
  return environment;
}

RunResult vramspill(std::vector<std::string> arguments, const Environment& extra = {}) {
  arguments.insert(arguments.begin(), VRAMSPILL_CLI);
  return run_program(arguments, clean(extra), 60);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vramspill-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    // Not a loadable library: ld.so says so on standard error and runs the command anyway, so
    // `run` is tested without preloading the real shim into sh.
    fake_library_ = (root_ / "libfake.so").string();
    std::ofstream(fake_library_) << "not a library\n";
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  std::string write_policy(const std::string& name, const std::string& toml) {
    const std::string path = (root_ / name).string();
    std::ofstream(path) << toml;
    return path;
  }

  // `vramspill run` with the fake library, running sh -c SCRIPT.
  RunResult run_sh(std::vector<std::string> options, const std::string& script,
                   const Environment& extra = {}) {
    std::vector<std::string> arguments = {"run", "--library", fake_library_};
    arguments.insert(arguments.end(), options.begin(), options.end());
    arguments.insert(arguments.end(), {"--", "/bin/sh", "-c", script});
    return vramspill(arguments, extra);
  }

  fs::path root_;
  std::string fake_library_;
};

// --- help --------------------------------------------------------------------------------------

TEST(CliHelp, top_level_help_lists_the_commands) {
  const RunResult result = vramspill({"--help"});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.out, "run")) << result.out;
  EXPECT_TRUE(contains(result.out, "stat")) << result.out;
  EXPECT_TRUE(contains(result.out, "--version")) << result.out;
}

TEST(CliHelp, run_help_documents_options_environment_and_exit_statuses) {
  const RunResult result = vramspill({"run", "--help"});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  for (const char* part : {"--config", "--budget", "--mode", "--set", "--library", "LD_PRELOAD",
                           "VRAMSPILL_CONFIG", "VRAMSPILL_LIBRARY", "127", "126", "COMMAND"})
    EXPECT_TRUE(contains(result.out, part)) << part << " missing from\n" << result.out;
}

TEST(CliHelp, stat_help_documents_options_and_columns) {
  const RunResult result = vramspill({"stat", "--help"});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  for (const char* part : {"--once", "--interval", "--pid", "--directory", "XDG_RUNTIME_DIR",
                           "/tmp/vramspill-", "peak", "refused"})
    EXPECT_TRUE(contains(result.out, part)) << part << " missing from\n" << result.out;
}

TEST(CliHelp, version_and_usage_errors) {
  const RunResult version = vramspill({"--version"});
  ASSERT_TRUE(version.exited(0)) << version.describe();
  EXPECT_EQ(version.out, std::string("vramspill ") + VRAMSPILL_VERSION + "\n");
  EXPECT_TRUE(vramspill({}).exited(2));
  EXPECT_TRUE(vramspill({"frobnicate"}).exited(2));
  EXPECT_TRUE(vramspill({"stat", "--interval", "0"}).exited(2));
}

// --- run ---------------------------------------------------------------------------------------

TEST_F(CliTest, run_with_a_bad_policy_exits_2_naming_file_line_and_key) {
  const std::string policy = write_policy("job.toml", "[device]\nbudget = \"lots\"\n");
  const std::string marker = (root_ / "ran").string();
  const RunResult result = run_sh({"-c", policy}, "touch " + marker);
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, policy + ":2:10")) << result.err;
  EXPECT_TRUE(contains(result.err, "device.budget")) << result.err;
  EXPECT_TRUE(contains(result.err, "'lots'")) << result.err;
  EXPECT_TRUE(contains(result.err, "not started")) << result.err;
  EXPECT_FALSE(fs::exists(marker)) << "the command ran despite the invalid policy";
}

TEST_F(CliTest, run_reports_an_unknown_key_and_a_missing_policy) {
  const std::string policy = write_policy("job.toml", "[device]\nbudjet = 1\n");
  RunResult result = run_sh({"-c", policy}, "true");
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "budjet")) << result.err;
  EXPECT_TRUE(contains(result.err, policy + ":2:1")) << result.err;

  result = run_sh({"-c", (root_ / "missing.toml").string()}, "true");
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "missing.toml")) << result.err;
}

TEST_F(CliTest, run_execs_the_command_with_the_shim_preloaded_and_the_policy_set) {
  const std::string policy = write_policy("job.toml", "[device]\nbudget = \"50%\"\n");
  const RunResult result =
      run_sh({"-c", policy}, "printf '%s|%s' \"$LD_PRELOAD\" \"$VRAMSPILL_CONFIG\"; exit 7");
  EXPECT_TRUE(result.exited(7)) << result.describe();  // the command's own status
  EXPECT_EQ(result.out, fake_library_ + "|" + policy);
}

TEST_F(CliTest, run_makes_a_relative_policy_path_absolute) {
  write_policy("job.toml", "[log]\nlevel = \"warn\"\n");
  const fs::path saved = fs::current_path();
  fs::current_path(root_);
  const RunResult result = run_sh({"-c", "job.toml"}, "printf %s \"$VRAMSPILL_CONFIG\"");
  fs::current_path(saved);
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(fs::path(result.out), root_ / "job.toml");
}

TEST_F(CliTest, run_keeps_other_preloaded_libraries_after_the_shim) {
  const RunResult result = run_sh({}, "printf %s \"$LD_PRELOAD\"",
                                  {{"LD_PRELOAD", "/nonexistent/a.so " + fake_library_}});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, fake_library_ + ":/nonexistent/a.so");
}

TEST_F(CliTest, run_options_set_the_shims_variables_and_are_checked) {
  RunResult result = run_sh({"--budget", "1GiB", "--set", "log.level=debug"},
                            "printf '%s %s' \"$VRAMSPILL_DEVICE_BUDGET\" \"$VRAMSPILL_LOG_LEVEL\"");
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "1GiB debug");

  result = run_sh({"--budget", "lots"}, "true");
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "VRAMSPILL_DEVICE_BUDGET")) << result.err;

  result = run_sh({"--set", "log.levl=debug"}, "true");
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "did you mean log.level?")) << result.err;

  // The environment beats the policy file, as in the shim.
  const std::string policy = write_policy("job.toml", "[device]\nbudget = \"1GiB\"\n");
  result = run_sh({"-c", policy}, "true", {{"VRAMSPILL_DEVICE_BUDGET", "lots"}});
  EXPECT_TRUE(result.exited(2)) << result.describe();
}

TEST_F(CliTest, run_takes_the_library_from_VRAMSPILL_LIBRARY_and_does_not_pass_it_on) {
  const RunResult result = vramspill(
      {"run", "/bin/sh", "-c", "printf '%s|%s' \"$LD_PRELOAD\" \"${VRAMSPILL_LIBRARY-unset}\""},
      {{"VRAMSPILL_LIBRARY", fake_library_}});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, fake_library_ + "|unset");
}

TEST_F(CliTest, run_leaves_the_commands_own_options_to_it) {
  // Without `--`: sh's -c is not run's -c.
  const RunResult result =
      vramspill({"run", "--library", fake_library_, "/bin/sh", "-c", "printf %s \"$0\"", "word"});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "word");
}

TEST_F(CliTest, run_fails_like_a_shell_when_the_command_is_missing) {
  RunResult result = vramspill({"run", "--library", fake_library_, "--", "no-such-command-xyz"});
  EXPECT_TRUE(result.exited(127)) << result.describe();
  EXPECT_TRUE(contains(result.err, "no-such-command-xyz: command not found")) << result.err;

  result = vramspill({"run", "--library", fake_library_, "--", fake_library_});  // not executable
  EXPECT_TRUE(result.exited(126)) << result.describe();

  result = vramspill({"run", "--library", fake_library_});
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "no command")) << result.err;

  result = vramspill({"run", "--library", (root_ / "missing.so").string(), "--", "true"});
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_TRUE(contains(result.err, "missing.so")) << result.err;
}

TEST(CliRun, run_finds_the_shim_next_to_its_own_directory) {
  if (VRAMSPILL_TEST_SANITIZED != 0)
    GTEST_SKIP() << "an ASan-built shim cannot be preloaded into sh without the ASan runtime";
  const RunResult result = vramspill({"run", "--", "/bin/sh", "-c", "printf %s \"$LD_PRELOAD\""});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(fs::equivalent(result.out, VRAMSPILL_TEST_SHIM)) << result.out;
  EXPECT_EQ(result.err, "") << "the real shim must load into sh silently";
}

// --- stat --------------------------------------------------------------------------------------

class CliStatTest : public CliTest {
 protected:
  void TearDown() override {
    stats_.close();
    CliTest::TearDown();
  }
  std::string directory() const { return (root_ / "stats").string(); }

  void publish_own_figures() {
    ASSERT_TRUE(stats_.open_in(directory().c_str()));
    const std::array<DeviceFigures, 1> devices = {DeviceFigures{.device = 0,
                                                                .total_bytes = 80ULL << 30,
                                                                .limit_bytes = 20ULL << 30,
                                                                .device_bytes = 19ULL << 30,
                                                                .device_peak_bytes = 20ULL << 30,
                                                                .spilled_managed_bytes = 3ULL << 30,
                                                                .spilled_host_bytes = 512ULL << 20,
                                                                .spills = 42,
                                                                .refused = 7}};
    stats_.publish({.host_pool_pinned_bytes = 8ULL << 30,
                    .host_spilled_bytes = 512ULL << 20,
                    .host_limit_bytes = 48ULL << 30,
                    .devices = devices});
  }

  StatsFile stats_;
};

TEST_F(CliStatTest, stat_once_shows_a_process_and_its_figures) {
  publish_own_figures();
  const RunResult result = vramspill({"stat", "--once", "--directory", directory()});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  const std::string& out = result.out;
  EXPECT_TRUE(contains(out, "1 process under vramspill")) << out;
  EXPECT_TRUE(contains(out, "pid " + std::to_string(getpid()) + "  ")) << out;
  EXPECT_TRUE(contains(out, "vramspill_cli_test")) << out;
  EXPECT_TRUE(contains(out, "host: pool 8.0 GiB pinned, 512.0 MiB spilled, limit 48.0 GiB")) << out;
  // dev, held, peak, limit, total, managed, host, spills, refused.
  EXPECT_TRUE(contains(out,
                       "    0    19.0 GiB    20.0 GiB    20.0 GiB    80.0 GiB     3.0 GiB"
                       "   512.0 MiB        42         7\n"))
      << out;
}

TEST_F(CliStatTest, stat_pid_selects_one_process) {
  publish_own_figures();
  RunResult result =
      vramspill({"stat", "--once", "--directory", directory(), "--pid", std::to_string(getpid())});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.out, "pid " + std::to_string(getpid()))) << result.out;

  const std::string other = std::to_string(getpid() + 1);
  result = vramspill({"stat", "--once", "--directory", directory(), "--pid", other});
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_EQ(result.out, "no process " + other + " under vramspill\n");
}

TEST_F(CliStatTest, stat_says_when_there_are_no_processes) {
  RunResult result = vramspill({"stat", "--once", "--directory", directory()});  // missing
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "no processes under vramspill\n");

  // Without --once, on a pipe: printed once, no refreshing.
  result = vramspill({"stat", "--directory", directory()});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "no processes under vramspill\n");
}

TEST_F(CliStatTest, stat_skips_and_removes_files_of_dead_processes) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StatsFile file;
    _exit(file.open_in(directory().c_str()) ? 0 : 1);  // exits without removing its file
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const fs::path left = fs::path(directory()) / (std::to_string(child) + ".stats");
  ASSERT_TRUE(fs::exists(left));

  const RunResult result = vramspill({"stat", "--once", "--directory", directory()});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "no processes under vramspill\n");
  EXPECT_FALSE(fs::exists(left));
}

TEST_F(CliStatTest, stat_finds_processes_in_the_default_directory) {
  // The shim's and stat's default: $XDG_RUNTIME_DIR/vramspill.
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("XDG_RUNTIME_DIR", root_.c_str(), 1);
  const bool opened = stats_.open_for_this_process();
  if (saved != nullptr)
    setenv("XDG_RUNTIME_DIR", restore.c_str(), 1);
  else
    unsetenv("XDG_RUNTIME_DIR");
  ASSERT_TRUE(opened);
  EXPECT_EQ(fs::path(stats_.path()).parent_path(), root_ / "vramspill");
  stats_.publish({});

  const RunResult result = vramspill({"stat", "--once"}, {{"XDG_RUNTIME_DIR", root_.string()}});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.out, "pid " + std::to_string(getpid()) + "  ")) << result.out;
  EXPECT_TRUE(contains(result.out, "no device figures yet")) << result.out;
}

}  // namespace
