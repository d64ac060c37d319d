#include "stats_scan.h"

#include <linux/limits.h>

#include <algorithm>
#include <iostream>

#include "telemetry/stats_directory.h"

namespace vramspill::cli {

using telemetry::StatsEntry;
using telemetry::StatsState;

std::vector<std::string> stats_directories(const std::string& directory) {
  if (!directory.empty()) return {directory};
  std::vector<std::string> out;
  char path[PATH_MAX];
  if (telemetry::stats_directory_path(path)) out.emplace_back(path);
  if (telemetry::fallback_stats_directory_path(path) &&
      std::find(out.begin(), out.end(), path) == out.end())
    out.emplace_back(path);
  return out;
}

std::vector<StatsEntry> scan_stats_directories(const std::vector<std::string>& directories,
                                               const std::string& program,
                                               std::vector<std::string>& reported) {
  std::vector<StatsEntry> entries;
  std::vector<std::string> still_invalid;
  for (const std::string& directory : directories) {
    for (StatsEntry& entry : telemetry::scan_stats_directory(directory, /*remove_stale=*/true)) {
      if (entry.state == StatsState::kInvalid) {
        if (std::find(reported.begin(), reported.end(), entry.path) == reported.end())
          std::cerr << program << ": skipping " << entry.path << ": " << entry.problem << "\n";
        still_invalid.push_back(entry.path);
      }
      entries.push_back(std::move(entry));
    }
  }
  // Only the files unreadable now stay reported: an exporter that runs for months beside jobs
  // whose files it cannot read (another version's) keeps no list of every one it ever saw.
  reported = std::move(still_invalid);
  std::stable_sort(entries.begin(), entries.end(), [](const StatsEntry& a, const StatsEntry& b) {
    return a.snapshot.pid < b.snapshot.pid;
  });
  return entries;
}

}  // namespace vramspill::cli
