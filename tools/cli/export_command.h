// `vramspill export`: a job's [trace] file (telemetry/trace_format.h) in a format other tools
// open. One format so far: memory-viz, a PyTorch memory snapshot (memory_viz_export.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace vramspill::cli {

struct ExportOptions {
  std::string format = "memory-viz";
  std::string trace;
  std::string output;
};

// Adds the subcommand and its options (bound to `options`) to `app`.
CLI::App* add_export_command(CLI::App& app, ExportOptions& options);

// Runs it; the exit status.
int run_export_command(const ExportOptions& options);

}  // namespace vramspill::cli
