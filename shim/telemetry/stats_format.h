// The stats segment: the layout of the small file a process under the shim publishes its figures
// in, one file per process, `<pid>.stats` in the per-user stats directory
// (telemetry/stats_directory.h). The shim writes it (telemetry/stats_file.h); `vramspill stat`
// reads it and shows it (tools/cli/stats_reader.h). This header is the one seam between the two
// (shim/README.md, "Layers"): plain data, no code, no dependencies beyond the standard library.
//
// Note [Stats segment consistency]
// Nobody maps the file. The shim keeps its segment in its own memory and publishes it whole,
// with one pwrite() at offset 0 (on the stats thread twice a second, and at exit: Note
// [Publishing stats off the hot path]); a reader pread()s the whole file into its own buffer and
// checks it before believing a byte of it: the size, the magic, the version and the checksum.
// Linux does not make a read atomic against a concurrent write of the same bytes, so a reader
// can see a publish half done; the checksum tells it so, and it reads again. What a reader shows
// is therefore one publish, every figure from the same instant.
//
// Neither side can hurt the other: the writer never reads the file, and a reader only copies
// bytes. A mapping would not give that: a store into a page the filesystem cannot back (a full
// tmpfs) or a load past the end of a file someone truncated raises SIGBUS. Here a file cut
// short, grown, emptied or filled with garbage by anyone is refused by the reader's checks, and
// the writer's next publish puts the whole segment back; a write the filesystem refuses
// (ENOSPC, EIO) switches stats off for the process, once, with one log line, and the job runs on.
//
// Note [Stats liveness]
// A file says whose it is (pid), but not whether that process still runs: its pid may be from
// another PID namespace sharing the directory (containers sharing /tmp), where the same number
// names a different process or none. So liveness is not decided by pid. The writer holds an
// flock() on its file from before its first write until it exits (a forked child shares the lock
// through the inherited descriptor; exec() drops it, the descriptor is close-on-exec). A file
// nobody holds a lock on, and whose segment is complete, was left by a process that is gone:
// `vramspill stat` takes the lock itself (LOCK_EX | LOCK_NB succeeds only with no holder) and
// deletes the file while holding it. An empty file (created, nothing written yet) is never
// deleted; a file of another format is never deleted either (its writer may hold no lock).
// The writer replaces a file already named `<pid>.stats` by the same rule (left by a process
// that had this pid, or by this one before it exec()ed); when a live process holds it (the same
// pid in another namespace), the writer takes `<pid>-1.stats`, `<pid>-2.stats`, ... instead.
//
// Compatibility: a reader refuses a file whose version or segment size differs from its own
// (the shim and the CLI come from one build). Change kStatsVersion when the layout changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vramspill::telemetry {

// "VRAMSPIL" read as a little-endian integer.
inline constexpr uint64_t kStatsMagic = 0x4c495053'4d415256ULL;
inline constexpr uint64_t kStatsVersion = 5;

// Device ordinals 0 .. kStatsMaxDevices-1 have a slot; figures of higher ordinals are not
// published (the exit summary in the log still has them).
inline constexpr std::size_t kStatsMaxDevices = 16;

// The command line, arguments separated by spaces, truncated, NUL-terminated.
inline constexpr std::size_t kStatsCommandBytes = 256;

// One device's figures. The slot's index is the device ordinal.
struct StatsDeviceSlot {
  uint64_t present;                // 1 when this publish has the device's figures
  uint64_t total_bytes;            // the device's memory
  uint64_t limit_bytes;            // what the ledger enforces (budget - reserve)
  uint64_t device_bytes;           // device memory the job holds now
  uint64_t device_peak_bytes;      // the most it held
  uint64_t spilled_managed_bytes;  // overflow living in managed memory now
  uint64_t spilled_host_bytes;     // overflow in pinned host memory now (pool, host-located VMM)
  uint64_t spills;                 // allocations that were spilled, since start
  uint64_t refused;                // over the budget and not spilled (OUT_OF_MEMORY), since start
  uint64_t tiered_device_bytes;    // tiered blocks' granules on the device now
  uint64_t tiered_host_bytes;      // tiered blocks' granules on the host now
};

// Tiered mode's moves since start, all devices (zero in the other modes).
struct StatsTiered {
  uint64_t evicted_bytes;   // moved to the host
  uint64_t promoted_bytes;  // moved to the device
  uint64_t windows;         // remap windows
  uint64_t window_ns;       // time from asking for each window to opening it again
  uint64_t launches;        // kernel launches while tiered blocks were tracked
  uint64_t unreadable_launches;  // of those, launches whose arguments could not be read
  // VMM calls the moves made (tiers/granule_arena.h's ArenaStats::move_vmm_calls): what a move
  // costs the host is mostly these (Note [Granule homes] in tiers/granule_homes.h).
  uint64_t move_vmm_calls;
};

struct StatsSegment {
  // --- header: the same in every publish ---
  uint64_t magic;
  uint64_t version;
  uint64_t segment_size;  // sizeof(StatsSegment) of the writer
  uint64_t checksum;      // stats_checksum() of the segment with this field 0
  uint64_t pid;           // in the writer's PID namespace (Note [Stats liveness])
  uint64_t started_unix_ns;  // CLOCK_REALTIME when the file was created
  char command[kStatsCommandBytes];

  // --- figures: what this publish saw ---
  uint64_t updated_unix_ns;  // CLOCK_REALTIME of the publish; 0 before the first
  uint64_t publish_count;
  uint64_t host_pool_pinned_bytes;  // host memory pinned for the pool (used or not)
  uint64_t host_spilled_bytes;      // host bytes holding spilled allocations, all devices
  uint64_t host_limit_bytes;        // the host limit (pinned + managed host bytes)
  uint64_t device_slots_used;       // highest published ordinal + 1
  StatsTiered tiered;
  StatsDeviceSlot devices[kStatsMaxDevices];
};

static_assert(std::is_trivially_copyable_v<StatsSegment> && std::is_standard_layout_v<StatsSegment>);
// No padding: the checksum covers every byte, and every byte is a field.
static_assert(std::has_unique_object_representations_v<StatsSegment>);

}  // namespace vramspill::telemetry
