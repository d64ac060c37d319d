// Where `vramspill stat` and `vramspill exporter` find the jobs under the shim: the stats
// directories (shim/telemetry/stats_directory.h) and every stats file in them.
#pragma once

#include <string>
#include <vector>

#include "stats_reader.h"

namespace vramspill::cli {

// `directory` when it is not empty; else the shim's own choice for this environment and the
// fallback under /tmp (a job started without XDG_RUNTIME_DIR publishes there), once each.
std::vector<std::string> stats_directories(const std::string& directory);

// Every entry of `directories`, sorted by pid. The files of killed jobs are deleted and returned
// as kStale (scan_stats_directory with remove_stale). Each unreadable file is reported on standard
// error as "PROGRAM: skipping PATH: PROBLEM" the first time it is seen: `reported` holds the
// paths already reported, across the calls of one run of the command, and is left holding those
// unreadable in this scan (a file that goes, or is read again, and comes back unreadable is
// reported again).
std::vector<telemetry::StatsEntry> scan_stats_directories(
    const std::vector<std::string>& directories, const std::string& program,
    std::vector<std::string>& reported);

}  // namespace vramspill::cli
