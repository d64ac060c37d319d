// The reading side of the stats segment (telemetry/stats_format.h), for `vramspill stat` and
// tests. Not part of the preloaded library (nothing in the shim calls it, so the linker leaves
// this object out of libvramspill.so); it allocates and may throw std::bad_alloc like any tool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "telemetry/stats_file.h"

namespace vramspill::telemetry {

// One process's figures, copied out of its file (Note [Stats segment consistency]: each figure
// is one the writer stored, the set may mix instants).
struct StatsSnapshot {
  uint64_t pid = 0;
  uint64_t start_time_ticks = 0;
  uint64_t started_unix_ns = 0;
  uint64_t updated_unix_ns = 0;  // 0: nothing published yet
  uint64_t publish_count = 0;
  std::string command;
  uint64_t host_pool_pinned_bytes = 0;
  uint64_t host_spilled_bytes = 0;
  uint64_t host_limit_bytes = 0;
  std::vector<DeviceFigures> devices;  // published devices, by ordinal
};

enum class StatsState {
  kLive,      // its process is running
  kStale,     // its process is gone (or the pid was reused): left by a killed process
  kNotReady,  // no magic yet: being created (or its creator died right then)
  kInvalid,   // not a stats file we can read: wrong owner, type, size or version
};

struct StatsEntry {
  std::string path;
  StatsState state = StatsState::kInvalid;
  std::string problem;     // for kInvalid: why
  StatsSnapshot snapshot;  // for kLive and kStale
};

// Reads one file (opened without following links, checked to be a regular file of this user of
// the right size, mapped read-only just long enough to copy it).
StatsEntry read_stats_file(const std::string& path);

// Every `*.stats` file in `directory`, sorted by pid. A missing directory is an empty list; an
// untrustworthy one (Note [Stats directory]) is a single kInvalid entry naming the problem. With
// `remove_stale`, the files of processes that are gone are deleted (and still returned, as
// kStale), so that a killed job's file does not linger.
std::vector<StatsEntry> scan_stats_directory(const std::string& directory, bool remove_stale);

// Whether the process `pid` that started at `start_time_ticks` is still running (a start time of
// 0, unknown to the writer, matches any process with that pid).
bool process_is_running(uint64_t pid, uint64_t start_time_ticks);

}  // namespace vramspill::telemetry
