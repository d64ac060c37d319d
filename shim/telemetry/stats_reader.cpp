#include "telemetry/stats_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "telemetry/stats_directory.h"

namespace vramspill::telemetry {

bool process_is_running(uint64_t pid, uint64_t start_time_ticks) {
  if (pid == 0 || pid > static_cast<uint64_t>(std::numeric_limits<int>::max())) return false;
  const std::optional<uint64_t> started = process_start_time(static_cast<int>(pid));
  return started && (start_time_ticks == 0 || *started == start_time_ticks);
}

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr std::string_view kSuffix = ".stats";

StatsEntry invalid(std::string path, std::string problem) {
  StatsEntry entry;
  entry.path = std::move(path);
  entry.state = StatsState::kInvalid;
  entry.problem = std::move(problem);
  return entry;
}

StatsSnapshot copy_segment(const StatsSegment& segment) {
  StatsSnapshot snapshot;
  snapshot.pid = segment.pid.load(kRelaxed);
  snapshot.start_time_ticks = segment.start_time_ticks.load(kRelaxed);
  snapshot.started_unix_ns = segment.started_unix_ns.load(kRelaxed);
  snapshot.updated_unix_ns = segment.updated_unix_ns.load(kRelaxed);
  snapshot.publish_count = segment.publish_count.load(kRelaxed);
  snapshot.command.assign(segment.command, strnlen(segment.command, sizeof segment.command));
  snapshot.host_pool_pinned_bytes = segment.host_pool_pinned_bytes.load(kRelaxed);
  snapshot.host_spilled_bytes = segment.host_spilled_bytes.load(kRelaxed);
  snapshot.host_limit_bytes = segment.host_limit_bytes.load(kRelaxed);
  const uint64_t used =
      std::min<uint64_t>(segment.device_slots_used.load(kRelaxed), kStatsMaxDevices);
  for (std::size_t i = 0; i < used; ++i) {
    const StatsDeviceSlot& slot = segment.devices[i];
    if (slot.present.load(kRelaxed) == 0) continue;
    DeviceFigures figures;
    figures.device = static_cast<int>(i);
    figures.total_bytes = slot.total_bytes.load(kRelaxed);
    figures.limit_bytes = slot.limit_bytes.load(kRelaxed);
    figures.device_bytes = slot.device_bytes.load(kRelaxed);
    figures.device_peak_bytes = slot.device_peak_bytes.load(kRelaxed);
    figures.spilled_managed_bytes = slot.spilled_managed_bytes.load(kRelaxed);
    figures.spilled_host_bytes = slot.spilled_host_bytes.load(kRelaxed);
    figures.spills = slot.spills.load(kRelaxed);
    figures.refused = slot.refused.load(kRelaxed);
    snapshot.devices.push_back(figures);
  }
  return snapshot;
}

constexpr int kOpenFlags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;

// Reads the open file `fd` (closed here); `inode` is set to its inode number.
StatsEntry read_stats_fd(int fd, const std::string& path, ino_t& inode) {
  if (fd < 0) return invalid(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat info {};
  std::string problem;
  if (fstat(fd, &info) != 0) {
    problem = std::string("cannot stat: ") + std::strerror(errno);
  } else if (!S_ISREG(info.st_mode)) {
    problem = "not a regular file";
  } else if (info.st_uid != geteuid()) {
    problem = "owned by uid " + std::to_string(info.st_uid) + ", not by this user";
  } else if (static_cast<uint64_t>(info.st_size) != sizeof(StatsSegment)) {
    problem = "size " + std::to_string(info.st_size) + " is not that of a stats segment (" +
              std::to_string(sizeof(StatsSegment)) + "): another vramspill version?";
  }
  inode = info.st_ino;
  if (!problem.empty()) {
    close(fd);
    return invalid(path, problem);
  }
  void* mapped = mmap(nullptr, sizeof(StatsSegment), PROT_READ, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);
  if (mapped == MAP_FAILED)
    return invalid(path, std::string("cannot map: ") + std::strerror(map_error));

  const auto& segment = *static_cast<const StatsSegment*>(mapped);
  StatsEntry entry;
  entry.path = path;
  // Acquire: the header written before the magic is visible (Note [Stats segment consistency]).
  if (segment.magic.load(std::memory_order_acquire) != kStatsMagic) {
    entry.state = StatsState::kNotReady;
  } else if (segment.version.load(kRelaxed) != kStatsVersion ||
             segment.segment_size.load(kRelaxed) != sizeof(StatsSegment)) {
    entry.state = StatsState::kInvalid;
    entry.problem = "format version " + std::to_string(segment.version.load(kRelaxed)) +
                    ", this reader knows " + std::to_string(kStatsVersion);
  } else {
    entry.snapshot = copy_segment(segment);
    entry.state = process_is_running(entry.snapshot.pid, entry.snapshot.start_time_ticks)
                      ? StatsState::kLive
                      : StatsState::kStale;
  }
  munmap(mapped, sizeof(StatsSegment));
  return entry;
}

}  // namespace

StatsEntry read_stats_file(const std::string& path) {
  ino_t inode = 0;
  return read_stats_fd(open(path.c_str(), kOpenFlags), path, inode);
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
    // Through the checked descriptor, not the path (Note [Stats directory]).
    const int directory_fd = dirfd(listing);
    ino_t inode = 0;
    StatsEntry entry = read_stats_fd(openat(directory_fd, item->d_name, kOpenFlags),
                                     directory + "/" + std::string(name), inode);
    // A new process with the same pid may have replaced the file since it was read: remove
    // only the file that was found stale.
    struct stat now {};
    if (entry.state == StatsState::kStale && remove_stale &&
        fstatat(directory_fd, item->d_name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == inode)
      unlinkat(directory_fd, item->d_name, 0);
    entries.push_back(std::move(entry));
  }
  closedir(listing);
  std::sort(entries.begin(), entries.end(), [](const StatsEntry& a, const StatsEntry& b) {
    return a.snapshot.pid != b.snapshot.pid ? a.snapshot.pid < b.snapshot.pid : a.path < b.path;
  });
  return entries;
}

}  // namespace vramspill::telemetry
