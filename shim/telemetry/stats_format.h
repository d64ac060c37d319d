// The stats segment: the layout of the small file a process under the shim publishes its figures
// in, one file per process, `<pid>.stats` in the per-user stats directory
// (telemetry/stats_directory.h). The shim writes it (telemetry/stats_file.h); `vramspill stat`
// maps it read-only and shows it. This header is the one seam between the two (DESIGN.md
// section 2): plain data, no code, no dependencies beyond the standard library.
//
// Note [Stats segment consistency]
// Every figure is a std::atomic<uint64_t> stored and loaded with relaxed ordering, so the writer
// never blocks on a reader (a reader can be stopped or killed at any point while it has the file
// mapped) and never takes a lock on the shim's side. The cost is that a reader's snapshot mixes
// instants: it may see a device's spill count from one publish and its spilled bytes from the
// next. Each figure on its own is always a value the writer stored (64-bit atomics never tear),
// and the figures change slowly next to a human's refresh rate, so that is what `vramspill stat`
// shows. A reader that needs figures from one instant cannot have them; none does today.
//
// The header (pid, start time, command, version) is written once, before `magic` is stored with
// release ordering: a reader that loads `magic` with acquire ordering and finds kStatsMagic sees
// the whole header. A file whose magic is not (yet) set is being created, or was left by a
// process that died while creating it; readers skip it.
//
// Compatibility: a reader refuses a file whose version or segment size differs from its own
// (the shim and the CLI come from one build). Change kStatsVersion when the layout changes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vramspill::telemetry {

// "VRAMSPIL" read as a little-endian integer.
inline constexpr uint64_t kStatsMagic = 0x4c495053'4d415256ULL;
inline constexpr uint64_t kStatsVersion = 1;

// Device ordinals 0 .. kStatsMaxDevices-1 have a slot; figures of higher ordinals are not
// published (the exit summary in the log still has them).
inline constexpr std::size_t kStatsMaxDevices = 16;

// The command line, arguments separated by spaces, truncated, NUL-terminated.
inline constexpr std::size_t kStatsCommandBytes = 256;

using StatsCounter = std::atomic<uint64_t>;
static_assert(StatsCounter::is_always_lock_free && sizeof(StatsCounter) == sizeof(uint64_t),
              "the stats segment needs lock-free 64-bit atomics with no hidden state");

// One device's figures. The slot's index is the device ordinal.
struct StatsDeviceSlot {
  StatsCounter present;                // 1 once this device's figures have been published
  StatsCounter total_bytes;            // the device's memory
  StatsCounter limit_bytes;            // what the ledger enforces (budget - reserve)
  StatsCounter device_bytes;           // device memory the job holds now
  StatsCounter device_peak_bytes;      // the most it held
  StatsCounter spilled_managed_bytes;  // overflow living in managed memory now
  StatsCounter spilled_host_bytes;     // overflow living in the pinned host pool now
  StatsCounter spills;                 // allocations that were spilled, since start
  StatsCounter refused;                // allocations refused (OUT_OF_MEMORY), since start
};

struct StatsSegment {
  // --- header: written once, then `magic` (Note [Stats segment consistency]) ---
  StatsCounter magic;
  StatsCounter version;
  StatsCounter segment_size;  // sizeof(StatsSegment) of the writer
  StatsCounter pid;
  StatsCounter start_time_ticks;  // /proc/<pid>/stat field 22: tells a reused pid apart
  StatsCounter started_unix_ns;   // CLOCK_REALTIME when the file was created
  char command[kStatsCommandBytes];

  // --- figures: updated by every publish ---
  StatsCounter updated_unix_ns;  // CLOCK_REALTIME of the last publish; 0 before the first
  StatsCounter publish_count;
  StatsCounter host_pool_pinned_bytes;  // host memory pinned for the pool (used or not)
  StatsCounter host_spilled_bytes;      // host bytes holding spilled allocations, all devices
  StatsCounter host_limit_bytes;        // the host limit (pinned + managed host bytes)
  StatsCounter device_slots_used;       // highest published ordinal + 1
  StatsDeviceSlot devices[kStatsMaxDevices];
};

static_assert(std::is_standard_layout_v<StatsSegment>);
static_assert(sizeof(StatsSegment) % sizeof(uint64_t) == 0);

}  // namespace vramspill::telemetry
