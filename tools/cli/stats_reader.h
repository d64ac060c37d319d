// The reading side of the stats segment (telemetry/stats_format.h), for `vramspill stat` and
// tests. Not part of the preloaded library (nothing in the shim calls it, so the linker leaves
// this object out of libvramspill.so); it allocates and may throw std::bad_alloc like any tool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "telemetry/stats_file.h"

namespace vramspill::telemetry {

// One process's figures, copied out of its file: one publish, every figure from the same
// instant (Note [Stats segment consistency]).
struct StatsSnapshot {
  uint64_t pid = 0;  // in the writer's PID namespace
  uint64_t started_unix_ns = 0;
  uint64_t updated_unix_ns = 0;  // 0: nothing published yet
  uint64_t publish_count = 0;
  std::string command;
  uint64_t host_pool_pinned_bytes = 0;
  uint64_t host_spilled_bytes = 0;
  uint64_t host_limit_bytes = 0;
  StatsTiered tiered{};
  std::vector<DeviceFigures> devices;  // published devices, by ordinal

  // Tiered blocks' granules on the host, all devices: host memory the job's data takes besides
  // the spills.
  uint64_t tiered_host_bytes() const noexcept {
    uint64_t bytes = 0;
    for (const DeviceFigures& device : devices) bytes += device.tiered_host_bytes;
    return bytes;
  }
};

// Note [Stats liveness] says how live and stale are told apart.
enum class StatsState {
  kLive,      // a process holds its lock: its writer, running (in whatever PID namespace)
  kStale,     // nobody holds its lock: left by a process that was killed
  kNotReady,  // empty: being created (or emptied by someone else; its writer refills it), and
              // not yet past the grace of Note [An empty stats file]
  kInvalid,   // not a stats file we can read: wrong owner, type, size, version or checksum,
              // garbage, or cut short or grown by someone else
};

struct StatsEntry {
  std::string path;
  StatsState state = StatsState::kInvalid;
  std::string problem;     // for kInvalid: why
  StatsSnapshot snapshot;  // for kLive and kStale
};

// Reads one file: opened without following links, checked to be a regular file of this user,
// read whole with pread() and checked (Note [Stats segment consistency]). Never maps it, so no
// file anyone truncates, grows or scribbles on can crash the reader.
StatsEntry read_stats_file(const std::string& path);

// Every `*.stats` file in `directory`, sorted by pid. A missing directory is an empty list; an
// untrustworthy one (Note [Stats directory]) is a single kInvalid entry naming the problem. With
// `remove_stale`, the files of processes that are gone are deleted (and still returned, as
// kStale), so that a killed job's file does not linger; only those (Note [Stats liveness]).
std::vector<StatsEntry> scan_stats_directory(const std::string& directory, bool remove_stale);

}  // namespace vramspill::telemetry
