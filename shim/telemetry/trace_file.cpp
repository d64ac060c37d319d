#include "telemetry/trace_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <new>

#include "core/use_tracker.h"
#include "telemetry/log.h"
#include "telemetry/process_facts.h"
#include "telemetry/trace_binary_format.h"
#include "telemetry/trace_format.h"

namespace vramspill::telemetry {

// One event of the trace, encoded in place in the trace's format (or, made with no tag, a text
// line of the header). Its fields are added in the text format's order, and each says what it
// is, not how it is written: the two encodings differ only inside these few functions.
// - Text: words and numbers separated by spaces, then a newline.
// - Binary: the payload's varints are written from kBinaryPrefix on; bytes() then puts the tag
//   and the payload's length just before them, so nothing is moved.
class TraceFile::Record {
 public:
  // A text line.
  Record() noexcept = default;
  // An empty record of `kind`, in `format`.
  Record(TraceFormat format, TraceTag kind) noexcept
      : binary_(format == TraceFormat::kBinary), kind_(kind), used_(binary_ ? kBinaryPrefix : 0) {}

  // Text only (the kind of an event line, the header's and end line's words).
  Record& word(std::string_view text) noexcept {
    separate();
    const std::size_t n = std::min(text.size(), bytes_.size() - 1 - used_);
    std::memcpy(bytes_.data() + used_, text.data(), n);
    used_ += n;
    return *this;
  }
  // A count, size, device or time: decimal in text.
  Record& number(uint64_t value) noexcept {
    if (binary_) return varint(value);
    separate();
    return digits(value, 10);
  }
  // A key or a tiered block's base: hexadecimal with 0x in text.
  Record& key(uint64_t value) noexcept {
    if (binary_) return varint(value);
    return word("0x").digits(value, 16);
  }
  // Its token in text, its index in binary (trace_binary_format.h's kTraceRouteOrder).
  Record& route(core::Route route) noexcept {
    if (binary_) return varint(core::route_index(route));
    return word(core::route_token(route));
  }

  // The whole record: the line with its newline, or tag, length and payload.
  std::string_view bytes() noexcept {
    if (!binary_) {
      bytes_[used_] = '\n';
      return {bytes_.data(), used_ + 1};
    }
    const std::size_t payload = used_ - kBinaryPrefix;
    std::array<char, kMaxVarintBytes> length{};
    const auto length_bytes =
        static_cast<std::size_t>(put_varint(length.data(), payload) - length.data());
    const std::size_t start = kBinaryPrefix - 1 - length_bytes;
    bytes_[start] = static_cast<char>(kind_);
    std::memcpy(bytes_.data() + start + 1, length.data(), length_bytes);
    return {bytes_.data() + start, used_ - start};
  }

 private:
  // The tag and a length of up to 2 bytes: a payload under 16 KiB, which bytes_ holds.
  static constexpr std::size_t kBinaryPrefix = 3;

  void separate() noexcept {
    if (used_ != 0 && used_ < bytes_.size() - 1) bytes_[used_++] = ' ';
  }
  Record& digits(uint64_t value, int base) noexcept {
    const auto result =
        std::to_chars(bytes_.data() + used_, bytes_.data() + bytes_.size() - 1, value, base);
    if (result.ec == std::errc{}) used_ = static_cast<std::size_t>(result.ptr - bytes_.data());
    return *this;
  }
  Record& varint(uint64_t value) noexcept {
    if (used_ + kMaxVarintBytes <= bytes_.size()) {
      used_ = static_cast<std::size_t>(put_varint(bytes_.data() + used_, value) - bytes_.data());
    }
    return *this;
  }

  bool binary_ = false;
  TraceTag kind_ = TraceTag::kEnd;
  std::size_t used_ = 0;
  // The longest event is a use of SubmissionUse::kCapacity blocks: a stamp, a device, a stream
  // and a count, then " 0x" and 16 hex digits a base in text, or up to kMaxVarintBytes in binary.
  // Not cleared: bytes() returns only what was written, and clearing it took a good part of a
  // binary event's time.
  static constexpr std::size_t kHeadBytes = 128;
  static constexpr std::size_t kLongest = kHeadBytes + core::SubmissionUse::kCapacity * 19;
  static_assert(kHeadBytes + core::SubmissionUse::kCapacity * kMaxVarintBytes <=
                    kMaxTracePayloadBytes,
                "a use of kCapacity bases fits a binary record a reader takes");
  std::array<char, kLongest> bytes_;
  static_assert(sizeof(bytes_) - kBinaryPrefix < (1U << 14), "a binary length is 1 or 2 bytes");
};

namespace {

uint64_t monotonic_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(now.tv_nsec);
}

// `path` with "%p" replaced by the process id and "%%" by "%".
std::string expand(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      out += std::to_string(getpid());
      ++i;
    } else if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == '%') {
      out += '%';
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

// Note [A trace replaces only a trace]: whether the file at `fd` is empty or starts as a trace
// of either format; otherwise `problem` says what it holds.
bool empty_or_a_trace(int fd, std::string& problem) {
  std::array<char, 64> start{};
  const ssize_t read = pread(fd, start.data(), start.size(), 0);
  if (read < 0) {
    problem = std::strerror(errno);
    return false;
  }
  const std::string_view held(start.data(), static_cast<std::size_t>(read));
  for (const std::string_view first_line : {kTraceFirstLine, kBinaryTraceFirstLine}) {
    if (held.starts_with(first_line) && held.substr(first_line.size()).starts_with('\n'))
      return true;
  }
  if (held.empty()) return true;
  const std::string_view line = held.substr(0, std::min(held.find('\n'), std::size_t{40}));
  problem = "it holds something other than a vramspill trace (it starts \"" +
            std::string(line) +
            "\"), which a trace never replaces: name a new file, or remove this one";
  return false;
}

// Whether flock() failed because the filesystem does not lock files, rather than a lock held.
bool no_locks_here(int error) {
  return error == ENOSYS || error == ENOLCK || error == EOPNOTSUPP;
}

// `path` opened for writing and locked by this process alone, or unlocked where its filesystem
// has no locks; -1 with `problem` set, and `locked_by_another` when another process holds the
// lock (Note [A trace never stops the job]).
int open_locked(const std::string& path, bool& locked_by_another, std::string& problem) {
  const int fd = open_owned_file(path, O_RDWR, problem);
  if (fd < 0) return -1;
  const bool locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
  const int lock_error = errno;
  if (!locked && no_locks_here(lock_error))
    logging::info("the filesystem of the trace file {} does not lock files ({}): it is written "
                  "without a lock, and two processes tracing to it would mix their events",
                  path, std::strerror(lock_error));
  if (locked || no_locks_here(lock_error)) {
    if (!empty_or_a_trace(fd, problem)) {
      close(fd);
      return -1;
    }
    if (ftruncate(fd, 0) == 0) return fd;
    problem = std::strerror(errno);
  } else {
    locked_by_another = lock_error == EWOULDBLOCK;
    problem = locked_by_another ? "another process is writing its trace there"
                                : std::strerror(lock_error);
  }
  close(fd);
  return -1;
}

// An event kind's word in the text format.
std::string_view text_word(TraceTag kind) noexcept {
  switch (kind) {
    case TraceTag::kDevice:
      return kTraceDevice;
    case TraceTag::kAlloc:
      return kTraceAlloc;
    case TraceTag::kFree:
      return kTraceFree;
    case TraceTag::kRefuse:
      return kTraceRefuse;
    case TraceTag::kEvict:
      return kTraceEvict;
    case TraceTag::kPromote:
      return kTracePromote;
    case TraceTag::kUse:
      return kTraceUse;
    case TraceTag::kLaunches:
      return kTraceLaunches;
    case TraceTag::kEnd:
      break;
  }
  return "?";
}

}  // namespace

TraceFile::TraceFile() noexcept = default;
TraceFile::~TraceFile() = default;

bool TraceFile::open(const std::string& path, TraceFormat format, std::string& problem) noexcept {
  try {
    std::string expanded = expand(path);
    bool locked_by_another = false;
    int fd = open_locked(expanded, locked_by_another, problem);
    if (fd < 0 && locked_by_another) {
      const std::string own = expanded + "." + std::to_string(getpid());
      logging::info("the trace file {} is another process's: this one traces to {}", expanded, own);
      expanded = own;
      fd = open_locked(expanded, locked_by_another, problem);
    }
    if (fd < 0) return false;
    path_ = expanded;
    return start(fd, format, problem);
  } catch (...) {  // out of memory for a path
    problem = "out of memory";
    return false;
  }
}

bool TraceFile::adopt(int fd, const std::string& name, TraceFormat format,
                      std::string& problem) noexcept {
  try {
    path_ = name;
  } catch (...) {
    problem = "out of memory";
    return false;
  }
  return start(fd, format, problem);
}

bool TraceFile::start(int fd, TraceFormat format, std::string& problem) noexcept {
  const std::lock_guard lock(mutex_);
  file_.reset(new (std::nothrow) OwnedDescriptor(fd));
  if (!file_ || !file_->open()) {
    if (!file_) close(fd);
    file_.reset();
    problem = "cannot keep the file open";
    return false;
  }
  format_ = format;
  start_ns_ = monotonic_ns();
  char command[512];
  read_command(command, sizeof command);
  // The header is text in both formats (trace_binary_format.h).
  Record pid;
  Record started;
  Record named;
  for (const std::string_view part :
       {format == TraceFormat::kBinary ? kBinaryTraceFirstLine : kTraceFirstLine,
        std::string_view("\n"), pid.word("# pid").number(static_cast<uint64_t>(getpid())).bytes(),
        started.word("# start_unix_ns").number(realtime_ns()).bytes(),
        named.word("# command").word(command).bytes()}) {
    std::memcpy(buffer_.data() + used_, part.data(), part.size());
    used_ += part.size();
  }
  if (const int error = write_buffer_locked(); error != 0) {
    problem = std::string("cannot write its first lines: ") + std::strerror(error);
    return false;
  }
  return true;
}

bool TraceFile::stopped() const noexcept {
  const std::lock_guard lock(mutex_);
  return stopped_;
}

TraceFile::Record TraceFile::stamped(TraceTag kind) const noexcept {
  Record event(format_, kind);
  event.number(monotonic_ns() - start_ns_);
  if (format_ == TraceFormat::kText) event.word(text_word(kind));  // the tag goes first
  return event;
}

void TraceFile::record(Record& event) noexcept {
  const std::string_view whole = event.bytes();
  const std::lock_guard lock(mutex_);
  if (!file_ || stopped_) return;
  if (append_locked(whole)) ++events_;
}

bool TraceFile::append_locked(std::string_view bytes) noexcept {
  if (used_ + bytes.size() > buffer_.size()) write_or_stop_locked();
  if (stopped_) return false;
  std::memcpy(buffer_.data() + used_, bytes.data(), bytes.size());
  used_ += bytes.size();
  return true;
}

int TraceFile::write_buffer_locked() noexcept {
  const int error = file_->write_all(buffer_.data(), used_);
  used_ = 0;
  if (error != 0) stopped_ = true;
  return error;
}

void TraceFile::write_or_stop_locked() noexcept {
  const int error = write_buffer_locked();
  if (error == 0) return;
  // OwnedDescriptor's EBADF: Note [The shim's own descriptors].
  logging::warn("the trace {} stopped after {} events ({}); the job goes on untraced", path_,
                events_,
                error == EBADF   ? "the program closed or replaced its descriptor"
                : error == EFBIG ? "it reached the file size limit, ulimit -f"
                                 : std::strerror(error));
}

void TraceFile::flush() noexcept {
  const std::lock_guard lock(mutex_);
  if (file_ && !stopped_ && used_ != 0) write_or_stop_locked();
}

void TraceFile::finish() noexcept {
  const std::lock_guard lock(mutex_);
  if (!file_ || stopped_) return;
  Record end(format_, TraceTag::kEnd);
  if (format_ == TraceFormat::kText) {
    end.word("# end").number(events_).word("events");
  } else {
    end.number(events_);
  }
  if (!append_locked(end.bytes())) return;
  write_or_stop_locked();
  stopped_ = true;
}

void TraceFile::launches_counted(uint64_t launches, uint64_t unreadable) noexcept {
  record(stamped(TraceTag::kLaunches).number(launches).number(unreadable));
}

void TraceFile::device_configured(int device, uint64_t total_bytes, uint64_t limit_bytes) noexcept {
  record(stamped(TraceTag::kDevice)
             .number(static_cast<uint64_t>(device))
             .number(total_bytes)
             .number(limit_bytes));
}

void TraceFile::allocated(const core::Allocation& allocation) noexcept {
  record(stamped(TraceTag::kAlloc)
             .number(static_cast<uint64_t>(allocation.device))
             .route(allocation.route)
             .key(allocation.key)
             .number(allocation.bytes));
}

void TraceFile::freed(const core::Allocation& allocation) noexcept {
  record(stamped(TraceTag::kFree)
             .number(static_cast<uint64_t>(allocation.device))
             .route(allocation.route)
             .key(allocation.key)
             .number(allocation.bytes));
}

void TraceFile::refused(int device, core::Route route, uint64_t bytes) noexcept {
  record(
      stamped(TraceTag::kRefuse).number(static_cast<uint64_t>(device)).route(route).number(bytes));
}

void TraceFile::evicted(int device, uint64_t base, uint64_t bytes) noexcept {
  record(stamped(TraceTag::kEvict).number(static_cast<uint64_t>(device)).key(base).number(bytes));
}

void TraceFile::promoted(int device, uint64_t base, uint64_t bytes) noexcept {
  record(stamped(TraceTag::kPromote).number(static_cast<uint64_t>(device)).key(base).number(bytes));
}

void TraceFile::used(int device, uint32_t stream, std::span<const uint64_t> bases) noexcept {
  // The hooks list at most SubmissionUse::kCapacity; more would not fit a record.
  bases = bases.first(std::min(bases.size(), core::SubmissionUse::kCapacity));
  Record event = stamped(TraceTag::kUse);
  event.number(static_cast<uint64_t>(device)).number(stream);
  // The count is the binary format's alone: a text line ends where the bases do.
  if (format_ == TraceFormat::kBinary) event.number(bases.size());
  for (const uint64_t base : bases) event.key(base);
  record(event);
}

}  // namespace vramspill::telemetry
