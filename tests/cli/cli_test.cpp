// The vramspill command, run as a program: `run` checks the policy, sets the environment and
// execs; `stat` finds the processes under the shim from their stats files; the help texts.
// The stats files `stat` reads are written by this test process itself, with the shim's writer.
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "subprocess.h"
#include "scratch_directory.h"
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

class CliTest : public vramspill::testing::ScratchDirectoryTest {
 protected:

  std::string write_policy(const std::string& name, const std::string& toml) {
    const std::string path = (root_ / name).string();
    std::ofstream(path) << toml;
    return path;
  }

  // `vramspill run` with the fake library, running sh -c SCRIPT.
  RunResult run_sh(std::vector<std::string> options, const std::string& script,
                   const Environment& extra = {}) {
    std::vector<std::string> arguments = {"run", "--library", empty_library_};
    arguments.insert(arguments.end(), options.begin(), options.end());
    arguments.insert(arguments.end(), {"--", "/bin/sh", "-c", script});
    return vramspill(arguments, extra);
  }

  // A shared library with nothing in it: `run` is tested without preloading the real shim.
  const std::string empty_library_ = CLI_TEST_EMPTY_LIBRARY;
};

// --- help --------------------------------------------------------------------------------------

TEST(CliHelp, top_level_help_lists_the_commands) {
  const RunResult result = vramspill({"--help"});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.out, "run")) << result.out;
  EXPECT_TRUE(contains(result.out, "stat")) << result.out;
  EXPECT_TRUE(contains(result.out, "doctor")) << result.out;
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

// The README's words: a request over the budget is not a refusal, which is only one that failed.
TEST(CliHelp, report_and_export_help_say_requests_over_the_budget) {
  for (const char* command : {"report", "export"}) {
    const RunResult result = vramspill({command, "--help"});
    ASSERT_TRUE(result.exited(0)) << result.describe();
    EXPECT_TRUE(contains(result.out, "requests over the budget")) << command << "\n" << result.out;
    EXPECT_FALSE(contains(result.out, "refusals")) << command << "\n" << result.out;
  }
  EXPECT_TRUE(contains(vramspill({"report", "--help"}).out, "up to three charts"));
}

TEST(CliHelp, version_and_usage_errors) {
  const RunResult version = vramspill({"--version"});
  ASSERT_TRUE(version.exited(0)) << version.describe();
  EXPECT_EQ(version.out, std::string("vramspill ") + VRAMSPILL_VERSION + "\n");
  EXPECT_TRUE(vramspill({}).exited(2));
  const RunResult unknown = vramspill({"frobnicate", "--once"});
  EXPECT_TRUE(unknown.exited(2)) << unknown.describe();
  EXPECT_EQ(unknown.err,
            "vramspill: unknown command 'frobnicate': expected one of run, stat, doctor, "
            "exporter, export, replay, report (vramspill --help)\n");
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
  EXPECT_EQ(result.out, empty_library_ + "|" + policy);
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
  // The library is preloaded into `vramspill run` itself here, ahead of an ASan build's runtime:
  // that build is told not to mind.
  const RunResult result = run_sh({}, "printf %s \"$LD_PRELOAD\"",
                                  {{"LD_PRELOAD", "/nonexistent/a.so " + empty_library_},
                                   {"ASAN_OPTIONS", "verify_asan_link_order=0"}});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, empty_library_ + ":/nonexistent/a.so");
}

TEST_F(CliTest, run_options_set_the_shims_variables_and_are_checked) {
  RunResult result = run_sh({"--budget", "1GiB", "--set", "log.level=debug"},
                            "printf '%s %s' \"$VRAMSPILL_DEVICE_BUDGET\" \"$VRAMSPILL_LOG_LEVEL\"");
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "1GiB debug");

  // A bad value is told as the option that gave it, not as the variable it would have become.
  result = run_sh({"--budget", "lots"}, "true");
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "--budget 'lots': not a size; expected a size")) << result.err;
  EXPECT_FALSE(contains(result.err, "VRAMSPILL_DEVICE_BUDGET")) << result.err;
  result = run_sh({"--set", "spill.host_limit=0"}, "true");
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "--set spill.host_limit='0': 0 bytes allows nothing"))
      << result.err;

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
      {{"VRAMSPILL_LIBRARY", empty_library_}});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, empty_library_ + "|unset");
}

TEST_F(CliTest, run_leaves_the_commands_own_options_to_it) {
  // Without `--`: sh's -c is not run's -c.
  const RunResult result =
      vramspill({"run", "--library", empty_library_, "/bin/sh", "-c", "printf %s \"$0\"", "word"});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, "word");
}

TEST_F(CliTest, run_fails_like_a_shell_when_the_command_is_missing) {
  RunResult result = vramspill({"run", "--library", empty_library_, "--", "no-such-command-xyz"});
  EXPECT_TRUE(result.exited(127)) << result.describe();
  EXPECT_TRUE(contains(result.err, "no-such-command-xyz: command not found")) << result.err;

  const std::string not_executable = write_policy("not-executable", "text\n");
  result = vramspill({"run", "--library", empty_library_, "--", not_executable});
  EXPECT_TRUE(result.exited(126)) << result.describe();

  result = vramspill({"run", "--library", empty_library_});
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "no command")) << result.err;

  result = vramspill({"run", "--library", (root_ / "missing.so").string(), "--", "true"});
  EXPECT_TRUE(result.exited(1)) << result.describe();
  EXPECT_TRUE(contains(result.err, "missing.so")) << result.err;
}

// Note [A preload that cannot load]: the loader would skip such a library and run the job
// without the shim, exit status 0. `run` refuses it, naming the path and the problem.
TEST_F(CliTest, run_refuses_a_library_the_loader_would_skip) {
  const std::string marker = (root_ / "ran").string();
  const auto refused = [&](const std::string& library, const std::string& problem,
                           const Environment& extra = {}) {
    std::vector<std::string> arguments = {"run"};
    if (extra.empty()) arguments.insert(arguments.end(), {"--library", library});
    arguments.insert(arguments.end(), {"--", "/bin/sh", "-c", "touch " + marker});
    const RunResult result = vramspill(arguments, extra);
    EXPECT_TRUE(result.exited(1)) << library << ": " << result.describe();
    EXPECT_TRUE(contains(result.err, "cannot preload the shim library " + library + ": " + problem))
        << result.err;
    EXPECT_FALSE(fs::exists(marker)) << library << ": the command ran without the shim";
  };

  const std::string text = write_policy("libtext.so", "not a library\n");
  refused(text, "it is not an ELF file");
  refused(text, "it is not an ELF file", {{"VRAMSPILL_LIBRARY", text}});

  for (const std::string directory : {"with space", "with:colon"}) {
    fs::create_directory(root_ / directory);
    const std::string copy = (root_ / directory / "libvramspill.so").string();
    fs::copy_file(empty_library_, copy);
    refused(copy, directory == "with space" ? "its path contains a space, which LD_PRELOAD"
                                            : "its path contains a colon, which LD_PRELOAD");
  }

  // This program's own ELF header, changed: an executable, then another machine's library.
  std::ifstream self("/proc/self/exe", std::ios::binary);
  Elf64_Ehdr header{};
  ASSERT_TRUE(self.read(reinterpret_cast<char*>(&header), sizeof header));
  header.e_type = ET_EXEC;
  const std::string executable = (root_ / "libexecutable.so").string();
  std::ofstream(executable, std::ios::binary)
      .write(reinterpret_cast<char*>(&header), sizeof header);
  refused(executable, "it is an executable (ET_EXEC), not a shared library (ET_DYN)");
  const unsigned machine = header.e_machine;
  header.e_type = ET_DYN;
  header.e_machine = static_cast<Elf64_Half>(machine == EM_AARCH64 ? EM_X86_64 : EM_AARCH64);
  const std::string foreign = (root_ / "libforeign.so").string();
  std::ofstream(foreign, std::ios::binary)
      .write(reinterpret_cast<char*>(&header), sizeof header);
  refused(foreign, "it is built for ELF machine " + std::to_string(header.e_machine) +
                       ", this vramspill for machine " + std::to_string(machine));
}

// Note [Only regular files]: a pipe would block (or, read by `run`, be empty for the job), a
// device would be read without end. Each is refused at once, and the command is not started.
TEST_F(CliTest, run_refuses_a_policy_that_is_not_a_regular_file) {
  const std::string fifo = (root_ / "job.toml").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = write_policy("big.toml", std::string(size_t{1} << 20, '#') + "\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "it is a pipe, not a regular file"},
      {"/dev/zero", "it is a character device, not a regular file"},
      {root_.string(), "it is a directory, not a regular file"},
      {big, "it is larger than 1 MiB"},
      // run_program's standard input is /dev/null.
      {"/dev/stdin", "it is a character device, not a regular file"}};
  const std::string marker = (root_ / "ran").string();
  for (const auto& [policy, problem] : cases) {
    const RunResult result = run_sh({"-c", policy}, "touch " + marker);
    EXPECT_TRUE(result.exited(2)) << policy << ": " << result.describe();
    EXPECT_TRUE(contains(result.err, "not started")) << result.err;
    EXPECT_TRUE(contains(result.err, problem)) << result.err;
    EXPECT_FALSE(fs::exists(marker)) << policy << ": the command ran";
  }
}

// Note [The policy the job reads]: /dev/stdin in the job is the job's own standard input, not
// the policy `run` checked. The job gets the path of the file itself.
TEST_F(CliTest, run_hands_the_job_the_policy_file_itself_not_dev_stdin) {
  const std::string policy = write_policy("job.toml", "[log]\nlevel = \"warn\"\n");
  const std::string script = "exec \"$0\" run --library \"$1\" -c /dev/stdin -- /bin/sh -c "
                             "'printf %s \"$VRAMSPILL_CONFIG\"' < \"$2\"";
  const RunResult result = run_program({"/bin/sh", "-c", script, VRAMSPILL_CLI, empty_library_,
                                        policy},
                                       clean(), 60);
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(result.out, policy);

  // From a pipe: refused (the job would find it empty or gone).
  const RunResult piped = run_program(
      {"/bin/sh", "-c",
       "printf '[log]\\n' | \"$0\" run --library \"$1\" -c /dev/stdin -- /bin/true",
       VRAMSPILL_CLI, empty_library_},
      clean(), 60);
  EXPECT_TRUE(piped.exited(2)) << piped.describe();
  EXPECT_TRUE(contains(piped.err, "it is a pipe, not a regular file")) << piped.err;
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

TEST_F(CliStatTest, stat_shows_tiered_moves_and_where_the_granules_are) {
  ASSERT_TRUE(stats_.open_in(directory().c_str()));
  const std::array<DeviceFigures, 1> devices = {
      DeviceFigures{.device = 0,
                    .limit_bytes = 16ULL << 30,
                    .device_bytes = 16ULL << 30,
                    .tiered_device_bytes = 14ULL << 30,
                    .tiered_host_bytes = 30ULL << 30}};
  stats_.publish({.tiered = {.evicted_bytes = 40ULL << 30,
                             .promoted_bytes = 24ULL << 30,
                             .windows = 120,
                             .window_ns = 2'500'000'000,
                             .launches = 5000,
                             .unreadable_launches = 40,
                             .move_vmm_calls = 32768},
                  .devices = devices});
  const RunResult result = vramspill({"stat", "--once", "--directory", directory()});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.out,
                       "  tiered: 40.0 GiB evicted, 24.0 GiB promoted, 120 remap "
                       "windows (2500.0 ms, 512 VMM calls per GiB moved, 27.49 GB/s over the "
                       "windows), 5000 kernel launches (40 unreadable)\n"))
      << result.out;
  EXPECT_TRUE(contains(result.out, ", 0 B spilled, 30.0 GiB in tiered blocks, limit "))
      << result.out;
  EXPECT_TRUE(contains(result.out, "  dev 0 tiered blocks: 14.0 GiB on the device, 30.0 GiB on "
                                   "the host\n"))
      << result.out;
}

TEST_F(CliStatTest, stat_shows_no_tiered_line_outside_tiered_mode) {
  publish_own_figures();
  const RunResult result = vramspill({"stat", "--once", "--directory", directory()});
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_FALSE(contains(result.out, "  tiered: ")) << result.out;
  EXPECT_FALSE(contains(result.out, "tiered blocks")) << result.out;
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
  // A directory named on the command line must exist: a typo is not "no processes".
  RunResult result = vramspill({"stat", "--once", "--directory", directory()});
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_TRUE(contains(result.err, "Directory does not exist: " + directory())) << result.err;
  // The exporter's may be made later, by the jobs it serves; it says so.
  result = vramspill({"exporter", "--once", "--directory", directory()});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.err, directory() + " is not a directory (yet)")) << result.err;

  std::filesystem::create_directories(directory());
  result = vramspill({"stat", "--once", "--directory", directory()});
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
