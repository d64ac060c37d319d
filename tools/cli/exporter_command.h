// `vramspill exporter`: serves the figures of every job under the shim on this machine to
// Prometheus (tools/cli/prometheus_metrics.h), read from the stats files as `vramspill stat`
// reads them (tools/cli/stats_scan.h) at each scrape. It is the program vramspill-exporter
// (exporter_main.cpp), which `vramspill exporter` runs (Note [The exporter is a program of its
// own] in exporter_launcher.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace vramspill::cli {

// Its line in `vramspill --help`, and the first of its own --help.
inline constexpr const char* kExporterSummary =
    "Serve the figures of every job under vramspill on this machine to Prometheus.";

struct ExporterOptions {
  std::string listen = "127.0.0.1:9477";
  bool once = false;
  std::string directory;  // empty: the default locations
};

// Adds its options (bound to `options`) and its help to `app`, the exporter's own command line.
void add_exporter_options(CLI::App& app, ExporterOptions& options);

// Runs it; the exit status.
int run_exporter_command(const ExporterOptions& options);

}  // namespace vramspill::cli
