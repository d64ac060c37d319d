#include "telemetry/stats_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "telemetry/log.h"
#include "telemetry/stats_directory.h"

namespace vramspill::telemetry {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

uint64_t realtime_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(now.tv_nsec);
}

// Reads up to size-1 bytes of a small /proc file into `buffer`; the count read, or -1.
ssize_t read_small_file(const char* path, char* buffer, std::size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t total = 0;
  while (static_cast<std::size_t>(total) + 1 < size) {
    const ssize_t got = read(fd, buffer + total, size - 1 - static_cast<std::size_t>(total));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    total += got;
  }
  ::close(fd);
  buffer[total] = '\0';
  return total;
}

// /proc/self/cmdline with the NULs between arguments turned into spaces, truncated to fit.
void read_command(char (&command)[kStatsCommandBytes]) {
  const ssize_t length = read_small_file("/proc/self/cmdline", command, sizeof command);
  if (length <= 0) {
    std::snprintf(command, sizeof command, "?");
    return;
  }
  for (ssize_t i = 0; i < length; ++i) {
    const auto byte = static_cast<unsigned char>(command[i]);
    if (byte == '\0' || byte < 0x20 || byte == 0x7f) command[i] = ' ';
  }
  for (ssize_t i = length - 1; i >= 0 && command[i] == ' '; --i) command[i] = '\0';
}

// The largest value stored in `counter`, whoever wins (publish() may run on several threads).
void store_max(StatsCounter& counter, uint64_t value) {
  uint64_t current = counter.load(kRelaxed);
  while (current < value && !counter.compare_exchange_weak(current, value, kRelaxed)) {
  }
}

// Stats are switched off at most once per process, so the warning is written at most once even
// if a caller retries.
constinit std::atomic<bool> g_failure_logged{false};

void log_failure(const char* what) {
  if (g_failure_logged.exchange(true, kRelaxed)) return;
  logging::warn(
      "stats are off for this process ({}); the job runs on, but `vramspill stat` "
      "will not show it",
      what);
}

}  // namespace

std::optional<uint64_t> process_start_time(int pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  char text[1024];
  if (read_small_file(path, text, sizeof text) <= 0) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so start after the last
  // ')'. The state is field 3; the start time is field 22, 19 fields after it.
  const char* cursor = std::strrchr(text, ')');
  if (cursor == nullptr) return std::nullopt;
  ++cursor;
  for (int field = 3; field < 22; ++field) {
    while (*cursor == ' ') ++cursor;
    while (*cursor != ' ' && *cursor != '\0') ++cursor;
    if (*cursor == '\0') return std::nullopt;
  }
  unsigned long long ticks = 0;
  if (std::sscanf(cursor, " %llu", &ticks) != 1) return std::nullopt;
  return ticks;
}

bool StatsFile::open_for_this_process() noexcept {
  char directory[PATH_MAX];
  if (!stats_directory_path(directory)) {
    log_failure("the stats directory's path is too long");
    return false;
  }
  return open_in(directory);
}

bool StatsFile::open_in(const char* directory) noexcept {
  if (is_open()) return true;
  const StatsDirectory opened = open_stats_directory(directory, /*create=*/true);
  if (opened.fd < 0) {
    log_failure(opened.problem);
    return false;
  }
  const bool ok = open_at(opened.fd, directory);
  ::close(opened.fd);
  return ok;
}

bool StatsFile::open_at(int directory_fd, const char* directory) noexcept {
  const int pid = getpid();
  char name[32];
  std::snprintf(name, sizeof name, "%d.stats", pid);
  char problem[PATH_MAX + 128];

  // O_EXCL | O_NOFOLLOW: never open something already there, nor follow a link (Note [Stats
  // directory]). A file with our pid can only be left over: from a process that had this pid
  // before and was killed, or from this process before it exec()ed. Replace it, once.
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat(directory_fd, name, flags, kStatsFileMode);
  if (fd < 0 && errno == EEXIST && unlinkat(directory_fd, name, 0) == 0)
    fd = openat(directory_fd, name, flags, kStatsFileMode);
  if (fd < 0) {
    std::snprintf(problem, sizeof problem, "cannot create %s/%s: %s", directory, name,
                  std::strerror(errno));
    log_failure(problem);
    return false;
  }

  // As with the directory: the umask may only have taken bits away; the file must be 0600.
  void* mapped = MAP_FAILED;
  if (fchmod(fd, kStatsFileMode) != 0 || ftruncate(fd, sizeof(StatsSegment)) != 0 ||
      (mapped = mmap(nullptr, sizeof(StatsSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
          MAP_FAILED) {
    std::snprintf(problem, sizeof problem, "cannot set up %s/%s: %s", directory, name,
                  std::strerror(errno));
    unlinkat(directory_fd, name, 0);
    ::close(fd);
    log_failure(problem);
    return false;
  }

  // The file is zero-filled by ftruncate, which is every counter at 0 (std::atomic<uint64_t> is
  // a plain 64-bit word: stats_format.h checks it), so the segment needs no constructor call.
  auto* segment = static_cast<StatsSegment*>(mapped);
  segment->version.store(kStatsVersion, kRelaxed);
  segment->segment_size.store(sizeof(StatsSegment), kRelaxed);
  segment->pid.store(static_cast<uint64_t>(pid), kRelaxed);
  segment->start_time_ticks.store(process_start_time(pid).value_or(0), kRelaxed);
  segment->started_unix_ns.store(realtime_ns(), kRelaxed);
  read_command(segment->command);
  segment->magic.store(kStatsMagic, std::memory_order_release);  // Note [Stats segment consistency]

  // The mapping keeps the file; a descriptor left open in the program could surprise it (a
  // program that counts or closes its descriptors).
  ::close(fd);
  std::snprintf(path_, sizeof path_, "%s/%s", directory, name);
  owner_pid_ = pid;
  mapping_ = segment;
  segment_.store(segment, std::memory_order_release);
  logging::debug("stats: publishing to {}", path_);
  return true;
}

void StatsFile::publish(const ProcessFigures& figures) noexcept {
  StatsSegment* segment = segment_.load(std::memory_order_acquire);
  if (segment == nullptr || getpid() != owner_pid_) return;
  segment->host_pool_pinned_bytes.store(figures.host_pool_pinned_bytes, kRelaxed);
  segment->host_spilled_bytes.store(figures.host_spilled_bytes, kRelaxed);
  segment->host_limit_bytes.store(figures.host_limit_bytes, kRelaxed);
  for (const DeviceFigures& device : figures.devices) {
    if (device.device < 0 || static_cast<std::size_t>(device.device) >= kStatsMaxDevices) continue;
    StatsDeviceSlot& slot = segment->devices[device.device];
    slot.total_bytes.store(device.total_bytes, kRelaxed);
    slot.limit_bytes.store(device.limit_bytes, kRelaxed);
    slot.device_bytes.store(device.device_bytes, kRelaxed);
    slot.device_peak_bytes.store(device.device_peak_bytes, kRelaxed);
    slot.spilled_managed_bytes.store(device.spilled_managed_bytes, kRelaxed);
    slot.spilled_host_bytes.store(device.spilled_host_bytes, kRelaxed);
    slot.spills.store(device.spills, kRelaxed);
    slot.refused.store(device.refused, kRelaxed);
    slot.present.store(1, kRelaxed);
    store_max(segment->device_slots_used, static_cast<uint64_t>(device.device) + 1);
  }
  segment->updated_unix_ns.store(realtime_ns(), kRelaxed);
  segment->publish_count.fetch_add(1, kRelaxed);
}

void StatsFile::remove() noexcept {
  if (owner_pid_ == 0 || getpid() != owner_pid_) return;
  if (segment_.exchange(nullptr, std::memory_order_acq_rel) == nullptr) return;  // removed already
  if (unlink(path_) != 0 && errno != ENOENT)
    logging::debug("stats: cannot remove {}: {}", path_, std::strerror(errno));
}

void StatsFile::close() noexcept {
  remove();
  if (mapping_ != nullptr) munmap(mapping_, sizeof(StatsSegment));
  mapping_ = nullptr;
  owner_pid_ = 0;
  path_[0] = '\0';
}

}  // namespace vramspill::telemetry
