// `vramspill report`: a job's [trace] file (telemetry/trace_format.h) as one self-contained HTML
// page of charts and tables (report_html.h) to open in any browser.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace vramspill::cli {

struct ReportOptions {
  std::string trace;
  std::string output;
  std::string title = "vramspill report";
};

// Adds the subcommand and its options (bound to `options`) to `app`.
CLI::App* add_report_command(CLI::App& app, ReportOptions& options);

// Runs it; the exit status.
int run_report_command(const ReportOptions& options);

}  // namespace vramspill::cli
