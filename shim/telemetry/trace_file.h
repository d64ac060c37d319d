// The [trace] file's writer (format: telemetry/trace_format.h): told of every memory event by
// the ledger and tiered placement (core::MemoryEvents), it buffers the lines and writes them in
// blocks, so that tracing costs a lock and a copy per event, not a system call.
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
//   process that finds it locked writes to `<path>.<pid>` instead, and logs so.
// - What is still buffered is written when the process exits, and every time the stats thread
//   publishes (twice a second), so a killed job's trace ends at most that long before it died
//   (with stats off, at most one buffer, kBufferBytes, before).
// - Tracing takes no memory after open(): events that arrive while the buffer is being written
//   wait on its lock.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/memory_events.h"
#include "telemetry/owned_descriptor.h"

namespace vramspill::telemetry {

class TraceFile final : public core::MemoryEvents {
 public:
  static constexpr std::size_t kBufferBytes = 64 * 1024;

  TraceFile() noexcept;
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Opens the trace at `path` ("%p" is replaced by the process id, "%%" by "%"), truncated,
  // and writes the header; false with `problem` set when that fails. Once.
  bool open(const std::string& path, std::string& problem) noexcept;
  // For tests: writes the trace to `fd` (taken over), with `name` standing for its path.
  bool adopt(int fd, const std::string& name, std::string& problem) noexcept;

  // The file the trace goes to (after "%p" and any fallback), or empty when not open.
  const std::string& path() const noexcept { return path_; }
  bool stopped() const noexcept;

  // Writes what is buffered.
  void flush() noexcept;
  // Writes what is buffered and the "# end" line; later events are dropped.
  void finish() noexcept;

  void device_configured(int device, uint64_t total_bytes, uint64_t limit_bytes) noexcept override;
  void allocated(const core::Allocation& allocation) noexcept override;
  void freed(const core::Allocation& allocation) noexcept override;
  void refused(int device, core::Route route, uint64_t bytes) noexcept override;
  void evicted(int device, uint64_t base, uint64_t bytes) noexcept override;
  void promoted(int device, uint64_t base, uint64_t bytes) noexcept override;
  void used(int device, uint32_t stream, std::span<const uint64_t> bases) noexcept override;

 private:
  class Line;

  // Keeps `fd` and writes the header.
  bool start(int fd, std::string& problem) noexcept;
  // A line holding the time now, for an event to be written after it: each event is formatted
  // once, in place.
  Line stamped() const noexcept;
  // Adds one event's line (from stamped()).
  void record(Line& line) noexcept;
  // Writes the buffer out; the caller holds mutex_. On failure stops the trace and returns the
  // errno.
  int write_buffer_locked() noexcept;
  // write_buffer_locked(), and a log line when that stops the trace.
  void write_or_stop_locked() noexcept;

  mutable std::mutex mutex_;
  std::unique_ptr<OwnedDescriptor> file_;  // null until open()
  std::string path_;
  uint64_t start_ns_ = 0;  // CLOCK_MONOTONIC at open()
  uint64_t events_ = 0;
  bool stopped_ = false;  // a write failed, or finish() ran
  std::size_t used_ = 0;
  std::array<char, kBufferBytes> buffer_{};
};

}  // namespace vramspill::telemetry
