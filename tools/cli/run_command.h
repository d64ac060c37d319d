// `vramspill run [options] [--] command [args...]`: checks the policy exactly as the shim will
// read it, then executes the command with libvramspill.so preloaded and the policy named in its
// environment. The command replaces vramspill (exec), so its exit status is the job's.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace vramspill::cli {

struct RunOptions {
  std::string config;                 // -c: the policy file; empty: VRAMSPILL_CONFIG as it is
  std::string library;                // --library; empty: VRAMSPILL_LIBRARY, else next to us
  std::string budget;                 // --budget -> VRAMSPILL_DEVICE_BUDGET
  std::string mode;                   // --mode -> VRAMSPILL_SPILL_MODE
  std::vector<std::string> settings;  // --set section.key=value -> VRAMSPILL_SECTION_KEY
  // The COMMAND positional, for the usage line only: main() hands the command over separately
  // (Note [Where the command starts]), so CLI11 never stores anything here.
  std::vector<std::string> usage_only;
};

// Exit statuses of `vramspill run` itself (otherwise the command's own).
inline constexpr int kRunCannotStart = 1;  // the shim library is missing or cannot be preloaded
inline constexpr int kRunBadInput = 2;     // usage error or invalid configuration
inline constexpr int kRunNotExecutable = 126;
inline constexpr int kRunNotFound = 127;

// Note [Where the command starts]
// CLI11 cannot tell `vramspill run -c job.toml python -u train.py` from options of `run` once the
// command has options of its own, and passes a `--` up to the parent command. So main() splits
// the arguments of `run` itself first: the command is everything after a `--`, or from the first
// argument that is neither an option of `run` nor an option's value. CLI11 then sees only what
// comes before it.

// Where the command starts in argv[first..argc) (the arguments after `run`): the index of its
// first word, and whether a `--` (at index - 1) separated it. Returns argc when there is none.
struct CommandStart {
  int index;
  bool after_separator;
};
CommandStart find_command_start(int argc, const char* const* argv, int first);

CLI::App* add_run_command(CLI::App& app, RunOptions& options);

// Checks, prepares and execs `command`; returns only on failure, with the exit status.
int run_run_command(const RunOptions& options, const std::vector<std::string>& command);

}  // namespace vramspill::cli
