// The shim's side of the stats segment (telemetry/stats_format.h): creates `<pid>.stats` in the
// per-user stats directory (telemetry/stats_directory.h), publishes the process's figures into it
// and removes it at exit.
//
//   constinit telemetry::StatsFile g_stats;           // a global: no constructor runs at load
//   g_stats.open_for_this_process();                  // once, after load_config()
//   g_stats.publish(figures);                         // any thread, rate-limited by the caller
//   g_stats.remove();                                 // at exit
//
// Stats are optional: when the file cannot be created, one line is logged (warning) and every
// later call is a no-op; the job never fails because of them. Nothing here throws or takes a
// lock, and only the failure message allocates. StatsFile has a constexpr constructor and a
// trivial destructor, so a global one runs no code at load or exit. publish() is not meant for
// signal handlers: gathering the figures it is given usually is not async-signal-safe.
#pragma once

#include <linux/limits.h>  // PATH_MAX

#include <atomic>
#include <cstdint>
#include <optional>
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
};

struct ProcessFigures {
  uint64_t host_pool_pinned_bytes = 0;
  uint64_t host_spilled_bytes = 0;
  uint64_t host_limit_bytes = 0;
  std::span<const DeviceFigures> devices;
};

class StatsFile {
 public:
  constexpr StatsFile() = default;
  StatsFile(const StatsFile&) = delete;
  StatsFile& operator=(const StatsFile&) = delete;

  // Creates and maps `<pid>.stats` in this process's stats directory (Note [Stats directory]).
  // Call once, before any publish(), not concurrently with the other members. False when stats
  // are off; the reason has been logged.
  bool open_for_this_process() noexcept;
  // The same in `directory` (tests; the checks on the directory are the same).
  bool open_in(const char* directory) noexcept;

  bool is_open() const noexcept { return segment_.load(std::memory_order_acquire) != nullptr; }
  // The file's path; empty when not open.
  const char* path() const noexcept { return path_; }

  // Stores `figures` (relaxed atomics: Note [Stats segment consistency]). Safe from any number of
  // threads at once; a no-op when not open, after remove(), and in a forked child (the file is
  // the parent's).
  void publish(const ProcessFigures& figures) noexcept;

  // Unlinks the file and stops publishing. A no-op in a forked child. The mapping stays until the
  // process exits: a thread may be inside publish() while the process exits (Note [Immortal
  // logger] has the same concern), and a page of address space is cheaper than a crash.
  void remove() noexcept;

  // remove(), then unmaps. Only when no other thread can be publishing (tests).
  void close() noexcept;

 private:
  bool open_at(int directory_fd, const char* directory) noexcept;

  std::atomic<StatsSegment*> segment_{nullptr};
  StatsSegment* mapping_ = nullptr;  // kept after remove(), for close()
  int owner_pid_ = 0;
  char path_[PATH_MAX] = {};
};

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot. With the
// pid, it names one process: a pid reused later has another start time. nullopt when there is
// no such process (or /proc is not mounted).
std::optional<uint64_t> process_start_time(int pid) noexcept;

}  // namespace vramspill::telemetry
