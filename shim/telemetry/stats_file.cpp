#include "telemetry/stats_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "telemetry/log.h"
#include "telemetry/owned_descriptor.h"
#include "telemetry/process_facts.h"
#include "telemetry/stats_directory.h"
#include "util/file_size_limit.h"

namespace vramspill::telemetry {
namespace {

// Stats are switched off at most once per process, so the warning is written at most once even
// if a caller retries.
constinit std::atomic<bool> g_failure_logged{false};

void log_failure(const char* what) {
  if (g_failure_logged.exchange(true, std::memory_order_relaxed)) return;
  logging::warn(
      "stats are off for this process ({}); the job runs on, but `vramspill stat` "
      "will not show it",
      what);
}

// `<pid>.stats`, then `<pid>-1.stats` ... when live processes hold those (Note [Stats liveness]).
constexpr int kNameAttempts = 8;

// `fd` moved to a number the shim owns (Note [The shim's own descriptors] in
// telemetry/owned_descriptor.h; the original closed); -1 when that fails. With a standard stream
// closed, the lowest free number is 0, 1 or 2, where the program's writes to that stream would
// land in the stats file; a number below kFirstOwnDescriptor is one a shell's `exec 3>file` or
// the program's dup2() may take over, dropping the lock that says the job is alive.
int as_owned_descriptor(int fd) {
  if (fd < 0 || fd >= kFirstOwnDescriptor) return fd;
  const int moved = owned_copy(fd);
  const int error = errno;
  ::close(fd);
  errno = error;
  return moved;
}

// Whether the file at `name` may be replaced (Note [Stats liveness]): something that is not a
// regular file (a planted link is never followed, and removed), or a file that is not empty and
// that nobody holds the lock of; removed here if so. False, with errno EEXIST, when it stays.
bool remove_abandoned(int directory_fd, const char* name) {
  const int fd = openat(directory_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return true;  // gone meanwhile
    const bool link = errno == ELOOP;
    errno = EEXIST;
    return link && unlinkat(directory_fd, name, 0) == 0;
  }
  struct stat info {};
  const bool removed = fstat(fd, &info) == 0 &&
                       (!S_ISREG(info.st_mode) ||
                        ((info.st_size > 0 || empty_past_grace(info)) && take_abandoned_lock(fd))) &&
                       unlink_if_unchanged(directory_fd, name, info);
  ::close(fd);
  errno = EEXIST;
  return removed;
}

// Creates `name` (0600, never following a link, on a descriptor >= 3), replacing an abandoned
// file of that name; -1 with errno set otherwise (EEXIST: a live process holds the name).
int create_file(int directory_fd, const char* name) {
  constexpr int kFlags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat(directory_fd, name, kFlags, kStatsFileMode);
  if (fd < 0 && errno == EEXIST && remove_abandoned(directory_fd, name))
    fd = openat(directory_fd, name, kFlags, kStatsFileMode);
  return as_owned_descriptor(fd);
}

}  // namespace

uint64_t stats_checksum(const StatsSegment& segment) noexcept {
  constexpr std::size_t kChecksumAt = offsetof(StatsSegment, checksum);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&segment);
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < sizeof segment; ++i) {
    const bool in_checksum = i >= kChecksumAt && i < kChecksumAt + sizeof segment.checksum;
    hash = (hash ^ (in_checksum ? 0U : bytes[i])) * 0x100000001b3ULL;
  }
  return hash;
}

bool take_abandoned_lock(int fd) noexcept {
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

bool empty_past_grace(const struct stat& info) noexcept {
  timespec now{};
  return info.st_size == 0 && clock_gettime(CLOCK_REALTIME, &now) == 0 &&
         now.tv_sec - info.st_mtim.tv_sec > kEmptyFileGraceSeconds;
}

bool unlink_if_unchanged(int directory_fd, const char* name, const struct stat& opened) noexcept {
  struct stat now {};
  return fstatat(directory_fd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
         now.st_dev == opened.st_dev && now.st_ino == opened.st_ino &&
         unlinkat(directory_fd, name, 0) == 0;
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
  char name[48];
  char problem[PATH_MAX + 128];
  int fd = -1;
  for (int suffix = 0; suffix < kNameAttempts && fd < 0; ++suffix) {
    if (suffix == 0)
      std::snprintf(name, sizeof name, "%d.stats", pid);
    else
      std::snprintf(name, sizeof name, "%d-%d.stats", pid, suffix);
    fd = create_file(directory_fd, name);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    std::snprintf(problem, sizeof problem, "cannot create %s/%s: %s", directory, name,
                  std::strerror(errno));
    log_failure(problem);
    return false;
  }

  // As with the directory: the umask may only have taken bits away; the file must be 0600.
  // The lock comes before the first write (Note [Stats liveness]).
  struct stat info {};
  if (fchmod(fd, kStatsFileMode) != 0 || !take_abandoned_lock(fd) || fstat(fd, &info) != 0) {
    std::snprintf(problem, sizeof problem, "cannot set up %s/%s: %s", directory, name,
                  std::strerror(errno));
    unlinkat(directory_fd, name, 0);
    ::close(fd);
    log_failure(problem);
    return false;
  }

  header_ = StatsSegment{};
  header_.magic = kStatsMagic;
  header_.version = kStatsVersion;
  header_.segment_size = sizeof(StatsSegment);
  header_.pid = static_cast<uint64_t>(pid);
  header_.started_unix_ns = realtime_ns();
  read_command(header_.command, sizeof header_.command);
  std::snprintf(path_, sizeof path_, "%s/%s", directory, name);
  fd_ = fd;
  device_ = info.st_dev;
  inode_ = info.st_ino;
  owner_pid_ = pid;
  publishing_.store(true, std::memory_order_release);

  // The header, with no figures yet: the file is complete from here on.
  StatsSegment first = header_;
  if (!write(first)) {
    // Stats are off (logged, the file removed); no other thread has seen the descriptor yet.
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  logging::debug("stats: publishing to {}", path_);
  return true;
}

void StatsFile::publish(const ProcessFigures& figures) noexcept {
  if (!is_open() || getpid() != owner_pid_) return;
  StatsSegment segment = header_;
  segment.host_pool_pinned_bytes = figures.host_pool_pinned_bytes;
  segment.host_spilled_bytes = figures.host_spilled_bytes;
  segment.host_limit_bytes = figures.host_limit_bytes;
  segment.tiered = figures.tiered;
  for (const DeviceFigures& device : figures.devices) {
    if (device.device < 0 || static_cast<std::size_t>(device.device) >= kStatsMaxDevices) continue;
    segment.devices[device.device] =
        StatsDeviceSlot{.present = 1,
                        .total_bytes = device.total_bytes,
                        .limit_bytes = device.limit_bytes,
                        .device_bytes = device.device_bytes,
                        .device_peak_bytes = device.device_peak_bytes,
                        .spilled_managed_bytes = device.spilled_managed_bytes,
                        .spilled_host_bytes = device.spilled_host_bytes,
                        .spills = device.spills,
                        .refused = device.refused,
                        .tiered_device_bytes = device.tiered_device_bytes,
                        .tiered_host_bytes = device.tiered_host_bytes};
    segment.device_slots_used =
        std::max(segment.device_slots_used, static_cast<uint64_t>(device.device) + 1);
  }
  segment.updated_unix_ns = realtime_ns();
  segment.publish_count = publish_count_.fetch_add(1, std::memory_order_relaxed) + 1;
  write(segment);
}

bool StatsFile::write(StatsSegment& segment) noexcept {
  segment.checksum = stats_checksum(segment);
  // A program may close descriptors it did not open (closefrom) and open a file of its own under
  // the same number: write only into the file this descriptor was opened for.
  struct stat info {};
  if (fstat(fd_, &info) != 0 || info.st_dev != device_ || info.st_ino != inode_) {
    switch_off("the program closed the stats file's descriptor");
    return false;
  }
  if (!within_file_size_limit(sizeof segment)) {  // Note [The file size limit]
    switch_off("the stats file would pass the file size limit, ulimit -f");
    return false;
  }
  ssize_t written = 0;
  do {
    written = pwrite(fd_, &segment, sizeof segment, 0);
  } while (written < 0 && errno == EINTR);
  // Someone made the file longer: the segment is all of it again (a file only shrinks here, so
  // this needs no room on the filesystem).
  if (written == static_cast<ssize_t>(sizeof segment) &&
      (info.st_size <= static_cast<off_t>(sizeof segment) || ftruncate(fd_, sizeof segment) == 0))
    return true;
  char problem[PATH_MAX + 128];
  if (written < 0 || written == static_cast<ssize_t>(sizeof segment))
    std::snprintf(problem, sizeof problem, "cannot write %s: %s", path_, std::strerror(errno));
  else
    std::snprintf(problem, sizeof problem, "cannot write %s: wrote %zd of %zu bytes", path_,
                  written, sizeof segment);
  switch_off(problem);
  return false;
}

void StatsFile::switch_off(const char* what) noexcept {
  if (!publishing_.exchange(false, std::memory_order_acq_rel)) return;  // off already
  unlink(path_);
  log_failure(what);
}

void StatsFile::remove() noexcept {
  if (owner_pid_ == 0 || getpid() != owner_pid_) return;
  if (!publishing_.exchange(false, std::memory_order_acq_rel)) return;  // removed already
  if (unlink(path_) != 0 && errno != ENOENT)
    logging::debug("stats: cannot remove {}: {}", path_, std::strerror(errno));
}

void StatsFile::close() noexcept {
  remove();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  owner_pid_ = 0;
  path_[0] = '\0';
}

}  // namespace vramspill::telemetry
