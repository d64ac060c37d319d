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

#include "telemetry/log.h"
#include "telemetry/process_facts.h"
#include "telemetry/trace_format.h"

namespace vramspill::telemetry {

// One line of the trace, built in place: words and numbers separated by spaces, then a newline.
class TraceFile::Line {
 public:
  Line& word(std::string_view text) noexcept {
    separate();
    const std::size_t n = std::min(text.size(), text_.size() - 1 - used_);
    std::memcpy(text_.data() + used_, text.data(), n);
    used_ += n;
    return *this;
  }
  Line& number(uint64_t value) noexcept { return digits(value, 10); }
  Line& hex(uint64_t value) noexcept { return word("0x").digits(value, 16, false); }
  // The text with its newline.
  std::string_view text() noexcept {
    text_[used_] = '\n';
    return {text_.data(), used_ + 1};
  }

 private:
  void separate() noexcept {
    if (used_ != 0 && used_ < text_.size() - 1) text_[used_++] = ' ';
  }
  Line& digits(uint64_t value, int base, bool separated = true) noexcept {
    if (separated) separate();
    const auto result =
        std::to_chars(text_.data() + used_, text_.data() + text_.size() - 1, value, base);
    if (result.ec == std::errc{}) used_ = static_cast<std::size_t>(result.ptr - text_.data());
    return *this;
  }

  // The longest event is a use of SubmissionUse::kCapacity (32) blocks: under 600 bytes.
  std::array<char, 768> text_{};
  std::size_t used_ = 0;
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

// `path` opened for writing and locked by this process alone; -1 with `problem` set, and
// `locked_by_another` when another process holds the lock (Note [A trace never stops the job]).
int open_locked(const std::string& path, bool& locked_by_another, std::string& problem) {
  const int fd = open_owned_file(path, O_WRONLY, problem);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    if (ftruncate(fd, 0) == 0) return fd;
    problem = std::strerror(errno);
  } else {
    locked_by_another = errno == EWOULDBLOCK;
    problem =
        locked_by_another ? "another process is writing its trace there" : std::strerror(errno);
  }
  close(fd);
  return -1;
}

}  // namespace

TraceFile::TraceFile() noexcept = default;
TraceFile::~TraceFile() = default;

bool TraceFile::open(const std::string& path, std::string& problem) noexcept {
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
    return start(fd, problem);
  } catch (...) {  // out of memory for a path
    problem = "out of memory";
    return false;
  }
}

bool TraceFile::adopt(int fd, const std::string& name, std::string& problem) noexcept {
  try {
    path_ = name;
  } catch (...) {
    problem = "out of memory";
    return false;
  }
  return start(fd, problem);
}

bool TraceFile::start(int fd, std::string& problem) noexcept {
  const std::lock_guard lock(mutex_);
  file_.reset(new (std::nothrow) OwnedDescriptor(fd));
  if (!file_ || !file_->open()) {
    if (!file_) close(fd);
    file_.reset();
    problem = "cannot keep the file open";
    return false;
  }
  start_ns_ = monotonic_ns();
  char command[512];
  read_command(command, sizeof command);
  Line pid;
  Line started;
  Line named;
  for (const std::string_view part :
       {std::string_view(kTraceFirstLine), std::string_view("\n"),
        pid.word("# pid").number(static_cast<uint64_t>(getpid())).text(),
        started.word("# start_unix_ns").number(realtime_ns()).text(),
        named.word("# command").word(command).text()}) {
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

TraceFile::Line TraceFile::stamped() const noexcept {
  Line line;
  line.number(monotonic_ns() - start_ns_);
  return line;
}

void TraceFile::record(Line& line) noexcept {
  const std::string_view whole = line.text();
  const std::lock_guard lock(mutex_);
  if (!file_ || stopped_) return;
  if (used_ + whole.size() > buffer_.size()) write_or_stop_locked();
  if (stopped_) return;
  std::memcpy(buffer_.data() + used_, whole.data(), whole.size());
  used_ += whole.size();
  ++events_;
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
  logging::warn(
      "the trace {} stopped after {} events ({}); the job goes on untraced", path_, events_,
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
  Line end;
  const std::string_view text = end.word("# end").number(events_).word("events").text();
  if (used_ + text.size() > buffer_.size()) write_or_stop_locked();
  if (stopped_) return;
  std::memcpy(buffer_.data() + used_, text.data(), text.size());
  used_ += text.size();
  write_or_stop_locked();
  stopped_ = true;
}

void TraceFile::device_configured(int device, uint64_t total_bytes, uint64_t limit_bytes) noexcept {
  record(stamped()
             .word(kTraceDevice)
             .number(static_cast<uint64_t>(device))
             .number(total_bytes)
             .number(limit_bytes));
}

void TraceFile::allocated(const core::Allocation& allocation) noexcept {
  record(stamped()
             .word(kTraceAlloc)
             .number(static_cast<uint64_t>(allocation.device))
             .word(core::route_token(allocation.route))
             .hex(allocation.key)
             .number(allocation.bytes));
}

void TraceFile::freed(const core::Allocation& allocation) noexcept {
  record(stamped()
             .word(kTraceFree)
             .number(static_cast<uint64_t>(allocation.device))
             .word(core::route_token(allocation.route))
             .hex(allocation.key)
             .number(allocation.bytes));
}

void TraceFile::refused(int device, core::Route route, uint64_t bytes) noexcept {
  record(stamped()
             .word(kTraceRefuse)
             .number(static_cast<uint64_t>(device))
             .word(core::route_token(route))
             .number(bytes));
}

void TraceFile::evicted(int device, uint64_t base, uint64_t bytes) noexcept {
  record(stamped().word(kTraceEvict).number(static_cast<uint64_t>(device)).hex(base).number(bytes));
}

void TraceFile::promoted(int device, uint64_t base, uint64_t bytes) noexcept {
  record(stamped().word(kTracePromote).number(static_cast<uint64_t>(device)).hex(base).number(bytes));
}

void TraceFile::used(int device, uint32_t stream, std::span<const uint64_t> bases) noexcept {
  Line line = stamped();
  line.word(kTraceUse).number(static_cast<uint64_t>(device)).number(stream);
  for (const CUdeviceptr base : bases) line.hex(base);
  record(line);
}

}  // namespace vramspill::telemetry
