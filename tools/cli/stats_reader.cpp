#include "stats_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "telemetry/stats_directory.h"

namespace vramspill::telemetry {
namespace {

constexpr std::string_view kSuffix = ".stats";
constexpr int kOpenFlags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;

// Reads of a file whose checksum does not match, before giving up on it: a publish being
// written (Note [Stats segment consistency]) takes microseconds.
constexpr int kReadAttempts = 8;

StatsEntry invalid(std::string path, std::string problem) {
  StatsEntry entry;
  entry.path = std::move(path);
  entry.state = StatsState::kInvalid;
  entry.problem = std::move(problem);
  return entry;
}

StatsSnapshot copy_segment(const StatsSegment& segment) {
  StatsSnapshot snapshot;
  snapshot.pid = segment.pid;
  snapshot.started_unix_ns = segment.started_unix_ns;
  snapshot.updated_unix_ns = segment.updated_unix_ns;
  snapshot.publish_count = segment.publish_count;
  snapshot.command.assign(segment.command, strnlen(segment.command, sizeof segment.command));
  snapshot.host_pool_pinned_bytes = segment.host_pool_pinned_bytes;
  snapshot.host_spilled_bytes = segment.host_spilled_bytes;
  snapshot.host_limit_bytes = segment.host_limit_bytes;
  snapshot.tiered = segment.tiered;
  const uint64_t used = std::min<uint64_t>(segment.device_slots_used, kStatsMaxDevices);
  for (std::size_t i = 0; i < used; ++i) {
    const StatsDeviceSlot& slot = segment.devices[i];
    if (slot.present == 0) continue;
    snapshot.devices.push_back(DeviceFigures{.device = static_cast<int>(i),
                                             .total_bytes = slot.total_bytes,
                                             .limit_bytes = slot.limit_bytes,
                                             .device_bytes = slot.device_bytes,
                                             .device_peak_bytes = slot.device_peak_bytes,
                                             .spilled_managed_bytes = slot.spilled_managed_bytes,
                                             .spilled_host_bytes = slot.spilled_host_bytes,
                                             .spills = slot.spills,
                                             .refused = slot.refused,
                                             .tiered_device_bytes = slot.tiered_device_bytes,
                                             .tiered_host_bytes = slot.tiered_host_bytes});
  }
  return snapshot;
}

// Up to `size` bytes from the start of `fd`; the count, or -1.
ssize_t read_from_start(int fd, unsigned char* buffer, std::size_t size) {
  std::size_t total = 0;
  while (total < size) {
    const ssize_t got = pread(fd, buffer + total, size - total, static_cast<off_t>(total));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;
    total += static_cast<std::size_t>(got);
  }
  return static_cast<ssize_t>(total);
}

// One read of the whole file into `segment`, checked (Note [Stats segment consistency]): kLive
// for a whole segment of this format (whether its process runs is decided after), kNotReady for
// an empty file, else kInvalid with `problem` set.
StatsState read_segment_once(int fd, StatsSegment& segment, std::string& problem) {
  // One byte more than a segment, so that a file that grew is seen to be too long.
  unsigned char buffer[sizeof(StatsSegment) + 1];
  const ssize_t size = read_from_start(fd, buffer, sizeof buffer);
  if (size < 0) {
    problem = std::string("cannot read: ") + std::strerror(errno);
    return StatsState::kInvalid;
  }
  if (size == 0) return StatsState::kNotReady;
  if (static_cast<std::size_t>(size) != sizeof(StatsSegment)) {
    problem = (static_cast<std::size_t>(size) < sizeof buffer
                   ? "size " + std::to_string(size)
                   : std::string("size more than ") + std::to_string(sizeof(StatsSegment))) +
              " is not that of a stats segment (" + std::to_string(sizeof(StatsSegment)) +
              "): another vramspill version, or damaged";
    return StatsState::kInvalid;
  }
  std::memcpy(&segment, buffer, sizeof segment);
  if (segment.magic != kStatsMagic) {
    problem = "not a stats file (no magic number)";
  } else if (segment.version != kStatsVersion || segment.segment_size != sizeof(StatsSegment)) {
    problem = "format version " + std::to_string(segment.version) + ", this reader knows " +
              std::to_string(kStatsVersion);
  } else if (segment.checksum != stats_checksum(segment)) {
    problem = "damaged (its checksum does not match)";
  } else {
    return StatsState::kLive;
  }
  return StatsState::kInvalid;
}

// Reads the open file `fd` (left open: for a kStale entry it holds the file's lock, Note [Stats
// liveness]); `info` is set to its fstat.
StatsEntry read_stats_fd(int fd, const std::string& path, struct stat& info) {
  if (fstat(fd, &info) != 0) return invalid(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) return invalid(path, "not a regular file");
  if (info.st_uid != geteuid())
    return invalid(path, "owned by uid " + std::to_string(info.st_uid) + ", not by this user");

  StatsEntry entry;
  entry.path = path;
  StatsSegment segment{};
  // A publish seen half written reads as damaged; read again (Note [Stats segment consistency]).
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    entry.problem.clear();
    entry.state = read_segment_once(fd, segment, entry.problem);
    if (entry.state != StatsState::kInvalid) break;
  }
  // Note [An empty stats file] in shim/telemetry/stats_file.h.
  if (entry.state == StatsState::kNotReady && empty_past_grace(info) && take_abandoned_lock(fd))
    entry.state = StatsState::kStale;
  if (entry.state != StatsState::kLive) return entry;
  entry.snapshot = copy_segment(segment);
  if (take_abandoned_lock(fd)) entry.state = StatsState::kStale;
  return entry;
}

}  // namespace

StatsEntry read_stats_file(const std::string& path) {
  const int fd = open(path.c_str(), kOpenFlags);
  if (fd < 0) return invalid(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat info {};
  StatsEntry entry = read_stats_fd(fd, path, info);
  close(fd);
  return entry;
}

std::vector<StatsEntry> scan_stats_directory(const std::string& directory, bool remove_stale) {
  std::vector<StatsEntry> entries;
  const StatsDirectory opened = open_stats_directory(directory.c_str(), /*create=*/false);
  if (opened.missing) return entries;
  if (opened.fd < 0) {
    entries.push_back(invalid(directory, opened.problem));
    return entries;
  }
  DIR* listing = fdopendir(opened.fd);  // takes the descriptor
  if (listing == nullptr) {
    close(opened.fd);
    entries.push_back(invalid(directory, std::string("cannot list: ") + std::strerror(errno)));
    return entries;
  }
  while (const dirent* item = readdir(listing)) {
    const std::string_view name = item->d_name;
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
    const std::string path = directory + "/" + std::string(name);
    // Through the checked descriptor, not the path (Note [Stats directory]).
    const int directory_fd = dirfd(listing);
    const int fd = openat(directory_fd, item->d_name, kOpenFlags);
    if (fd < 0) {
      // Removed between the listing and the open: its process exited.
      if (errno != ENOENT)
        entries.push_back(invalid(path, std::string("cannot open: ") + std::strerror(errno)));
      continue;
    }
    struct stat info {};
    StatsEntry entry = read_stats_fd(fd, path, info);
    // Deleted while its lock is held here, so no process can be using it (Note [Stats liveness]).
    if (entry.state == StatsState::kStale && remove_stale)
      unlink_if_unchanged(directory_fd, item->d_name, info);
    close(fd);
    entries.push_back(std::move(entry));
  }
  closedir(listing);
  std::sort(entries.begin(), entries.end(), [](const StatsEntry& a, const StatsEntry& b) {
    return a.snapshot.pid != b.snapshot.pid ? a.snapshot.pid < b.snapshot.pid : a.path < b.path;
  });
  return entries;
}

}  // namespace vramspill::telemetry
