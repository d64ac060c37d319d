// The [trace] file's writer (formats: telemetry/trace_format.h, text, and
// telemetry/trace_binary_format.h): told of every memory event by the ledger and tiered
// placement (core::MemoryEvents), it buffers the lines or records and writes them in blocks, so
// that tracing costs a lock and a copy per event, not a system call.
//
// Note [A trace never stops the job]
// The trace is the job's servant. Every failure leaves the job running as it would untraced:
// - The file is written with write(), never mapped: a full disk or tmpfs is ENOSPC, not SIGBUS.
//   A write that fails (full, a quota, the file gone bad) stops the trace, with one log line that
//   says why and how many events were kept; the job goes on.
// - Its descriptor is the shim's own (Note [The shim's own descriptors]): a program that closes
//   or reuses descriptor numbers never gets trace lines in its files.
// - Two processes given the same path (a job that starts a second CUDA process without %p in
//   the path) must not overwrite each other: the file is locked (flock) while written, and a
//   process that finds it locked writes to `<path>.<pid>` instead, and logs so. A filesystem
//   that does not lock files (Lustre mounted without flock, NFSv3 without its lock daemon: ENOSYS,
//   ENOLCK, EOPNOTSUPP) is traced to without the lock, and the log says that two processes
//   tracing to that one path there would mix their events.
// - What is still buffered is written when the process exits, and every time the stats thread
//   publishes (twice a second), so a killed job's trace ends at most that long before it died
//   (with stats off, at most one buffer, kBufferBytes, before).
// - Tracing takes no memory after open(): events that arrive while the buffer is being written
//   wait on its lock.
//
// Note [A trace replaces only a trace]
// The path is the user's to name, and a slip can name any file: a job's results, its log, a file
// the program itself writes. So the trace is written only into a file that is empty (new, or left
// empty) or already holds a vramspill trace of either format (the same job run again, which
// replaces its old trace as users expect). Anything else is left exactly as it was, the job runs
// untraced, and the log says why. The check is made under the trace's lock, so two jobs tracing
// to one path still go beside each other as above.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "config/config.h"
#include "core/memory_events.h"
#include "telemetry/owned_descriptor.h"
#include "telemetry/trace_binary_format.h"

namespace vramspill::telemetry {

class TraceFile final : public core::MemoryEvents {
 public:
  static constexpr std::size_t kBufferBytes = 64 * 1024;

  TraceFile() noexcept;
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Opens the trace at `path` ("%p" is replaced by the process id, "%%" by "%"), truncated if it
  // is an earlier trace (Note [A trace replaces only a trace]), and writes the header of
  // `format`; false with `problem` set when that fails or the file is something else. Once.
  bool open(const std::string& path, TraceFormat format, std::string& problem) noexcept;
  // For tests: writes the trace to `fd` (taken over), with `name` standing for its path.
  bool adopt(int fd, const std::string& name, TraceFormat format, std::string& problem) noexcept;

  // The file the trace goes to (after "%p" and any fallback), or empty when not open.
  const std::string& path() const noexcept { return path_; }
  bool stopped() const noexcept;

  // Writes what is buffered.
  void flush() noexcept;
  // Writes what is buffered and the end ("# end" line or end record); later events are dropped.
  void finish() noexcept;
  // The process's kernel launches and how many could not be read (the launches event), just
  // before finish(): counted for the whole process, not told as they happen.
  void launches_counted(uint64_t launches, uint64_t unreadable) noexcept;

  void device_configured(int device, uint64_t total_bytes, uint64_t limit_bytes) noexcept override;
  void allocated(const core::Allocation& allocation) noexcept override;
  void freed(const core::Allocation& allocation) noexcept override;
  void refused(int device, core::Route route, uint64_t bytes) noexcept override;
  void evicted(int device, uint64_t base, uint64_t bytes) noexcept override;
  void promoted(int device, uint64_t base, uint64_t bytes) noexcept override;
  void used(int device, uint32_t stream, std::span<const uint64_t> bases) noexcept override;

 private:
  class Record;

  // Keeps `fd` and writes the header of `format`.
  bool start(int fd, TraceFormat format, std::string& problem) noexcept;
  // A record of the event `kind` holding the time now, for the event's fields to be added to:
  // each event is encoded once, in place, before the lock is taken.
  Record stamped(TraceTag kind) const noexcept;
  // Adds one event's record (from stamped()).
  void record(Record& event) noexcept;
  // Adds `bytes` to the buffer, writing it out first when they would not fit; the caller holds
  // mutex_. False when the trace has stopped.
  bool append_locked(std::string_view bytes) noexcept;
  // Writes the buffer out; the caller holds mutex_. On failure stops the trace and returns the
  // errno.
  int write_buffer_locked() noexcept;
  // write_buffer_locked(), and a log line when that stops the trace.
  void write_or_stop_locked() noexcept;

  mutable std::mutex mutex_;
  std::unique_ptr<OwnedDescriptor> file_;  // null until open()
  std::string path_;
  TraceFormat format_ = TraceFormat::kText;  // set before any event, by start()
  uint64_t start_ns_ = 0;                    // CLOCK_MONOTONIC at open()
  uint64_t events_ = 0;
  bool stopped_ = false;  // a write failed, or finish() ran
  std::size_t used_ = 0;
  std::array<char, kBufferBytes> buffer_{};
};

}  // namespace vramspill::telemetry
