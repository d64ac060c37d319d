// What `vramspill exporter` serves at /metrics: the figures of the jobs under the shim in
// Prometheus's text exposition format (version 0.0.4). A pure function of the stats entries, so
// the format is tested without a server.
#pragma once

#include <string>
#include <vector>

#include "stats_reader.h"

namespace vramspill::cli {

// Every metric family, each with its HELP and TYPE lines even when it has no samples: the live
// jobs' figures (labels pid and command, and device for a device's figures), the count of live
// jobs and of the killed jobs' and unreadable files among `entries`. A job that has published
// nothing yet counts as a job and has only its start time.
std::string render_prometheus_metrics(const std::vector<telemetry::StatsEntry>& entries);

// The content type of that text.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace vramspill::cli
