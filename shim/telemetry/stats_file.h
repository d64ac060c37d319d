// The shim's side of the stats segment (telemetry/stats_format.h): creates `<pid>.stats` in the
// per-user stats directory (telemetry/stats_directory.h), publishes the process's figures into it
// and removes it at exit.
//
//   constinit telemetry::StatsFile g_stats;           // a global: no constructor runs at load
//   g_stats.open_for_this_process();                  // once, after load_config()
//   g_stats.publish(figures);                         // the stats thread, and at exit
//   g_stats.remove();                                 // at exit
//
// Stats are optional: when the file cannot be created or written, one line is logged (warning)
// and every later call is a no-op; the job never fails because of them (Note [Stats segment
// consistency]). Nothing here throws or takes a lock other than the file's flock (Note [Stats
// liveness]), and only the failure message allocates. StatsFile has a constexpr constructor and
// a trivial destructor, so a global one runs no code at load or exit. publish() makes system
// calls: keep it off the hot path (Note [Publishing stats off the hot path]); it is not meant for
// signal handlers either.
#pragma once

#include <linux/limits.h>  // PATH_MAX
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <span>

#include "telemetry/stats_format.h"

namespace vramspill::telemetry {

struct DeviceFigures {
  int device = 0;  // ordinal; ordinals >= kStatsMaxDevices are not published
  uint64_t total_bytes = 0;
  uint64_t limit_bytes = 0;
  uint64_t device_bytes = 0;
  uint64_t device_peak_bytes = 0;
  uint64_t spilled_managed_bytes = 0;
  uint64_t spilled_host_bytes = 0;
  uint64_t spills = 0;
  uint64_t refused = 0;
  uint64_t tiered_device_bytes = 0;
  uint64_t tiered_host_bytes = 0;
};

struct ProcessFigures {
  uint64_t host_pool_pinned_bytes = 0;
  uint64_t host_spilled_bytes = 0;
  uint64_t host_limit_bytes = 0;
  StatsTiered tiered{};
  std::span<const DeviceFigures> devices;
};

class StatsFile {
 public:
  constexpr StatsFile() = default;
  StatsFile(const StatsFile&) = delete;
  StatsFile& operator=(const StatsFile&) = delete;

  // Creates `<pid>.stats` in this process's stats directory (Note [Stats directory]), takes its
  // lock (Note [Stats liveness]) and writes the header. Call once, before any publish(), not
  // concurrently with the other members. False when stats are off; the reason has been logged.
  bool open_for_this_process() noexcept;
  // The same in `directory` (tests; the checks on the directory are the same).
  bool open_in(const char* directory) noexcept;

  bool is_open() const noexcept { return publishing_.load(std::memory_order_acquire); }
  // The file's path; empty when not open.
  const char* path() const noexcept { return path_; }

  // Writes the whole segment with `figures` into the file (Note [Stats segment consistency]);
  // every publish replaces all figures. Safe from several threads at once (each writes a whole
  // segment; two at once may leave a torn file, which readers detect, until the next publish).
  // A no-op when not open, after remove(), and in a forked child (the file is the parent's). A
  // write that fails switches stats off: logged once, the file removed.
  void publish(const ProcessFigures& figures) noexcept;

  // Unlinks the file and stops publishing. A no-op in a forked child. The descriptor stays open
  // until the process exits: a thread may be inside publish() while the process exits (Note
  // [Immortal logger] has the same concern), and a descriptor closed under it could be reused
  // by the program for a file of its own, which publish() would then overwrite.
  void remove() noexcept;

  // remove(), then closes the descriptor. Only when no other thread can be publishing (tests).
  void close() noexcept;

 private:
  bool open_at(int directory_fd, const char* directory) noexcept;
  // pwrite()s `segment` (its checksum set here); false, with stats switched off, on failure.
  bool write(StatsSegment& segment) noexcept;
  void switch_off(const char* what) noexcept;

  std::atomic<bool> publishing_{false};
  std::atomic<uint64_t> publish_count_{0};
  int fd_ = -1;  // >= 3 (never a standard stream's number), close-on-exec, holds the flock
  dev_t device_ = 0;  // the file's identity, checked before each write
  ino_t inode_ = 0;
  int owner_pid_ = 0;
  StatsSegment header_{};  // every publish starts from this copy
  char path_[PATH_MAX] = {};
};

// The checksum stored in `segment.checksum`: FNV-1a over every byte, with that field taken as 0.
uint64_t stats_checksum(const StatsSegment& segment) noexcept;

// Whether the open file `fd` has no lock holder: takes LOCK_EX | LOCK_NB on it, which then stays
// with `fd` (Note [Stats liveness]). False when a holder has it, and when flock() fails otherwise
// (nothing proves the file abandoned then).
bool take_abandoned_lock(int fd) noexcept;

// Note [An empty stats file]
// A writer creates its file, then takes its lock, then writes: for those microseconds the file is
// empty and unlocked, and must not be taken for a killed job's. But a job killed in between leaves
// it so for good, and neither readers nor a new writer of that name would ever delete it. So an
// empty file counts as abandoned once it is older than kEmptyFileGraceSeconds (and its lock is free).
inline constexpr int64_t kEmptyFileGraceSeconds = 10;
// Whether `info` (an fstat) is of an empty file past kEmptyFileGraceSeconds.
bool empty_past_grace(const struct stat& info) noexcept;

// Unlinks `name` in `directory_fd` if it is still the file `opened` describes (fstat of a
// descriptor the caller holds, with the file's lock): a new process may have replaced it.
bool unlink_if_unchanged(int directory_fd, const char* name, const struct stat& opened) noexcept;

}  // namespace vramspill::telemetry
