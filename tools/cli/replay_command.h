// `vramspill replay`: a tiered-mode job's trace replayed through every eviction policy, at its
// budget or another, against the fewest moves any policy could make (trace_replay.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace vramspill::cli {

struct ReplayOptions {
  std::string trace;
  int device = 0;
  std::string budget;                 // a size; empty: the device's limit in the trace
  std::vector<std::string> policies;  // empty: every registered one
};

// Adds the subcommand and its options (bound to `options`) to `app`.
CLI::App* add_replay_command(CLI::App& app, ReplayOptions& options);

// Runs it; the exit status.
int run_replay_command(const ReplayOptions& options);

}  // namespace vramspill::cli
