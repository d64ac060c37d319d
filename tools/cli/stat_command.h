// `vramspill stat`: lists the processes running under the shim, from the stats files in the
// per-user stats directory (shim/telemetry/stats_directory.h), and shows their figures,
// refreshing like top.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace vramspill::cli {

struct StatOptions {
  bool once = false;
  double interval_seconds = 2.0;
  int64_t pid = 0;        // 0: every process
  std::string directory;  // empty: the default locations
};

// Adds the subcommand and its options (bound to `options`) to `app`.
CLI::App* add_stat_command(CLI::App& app, StatOptions& options);

// Runs it; the exit status.
int run_stat_command(const StatOptions& options);

}  // namespace vramspill::cli
