#include "telemetry/stats_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vramspill::telemetry {
namespace {

// snprintf into `out`; false when it did not fit.
template <typename... Args>
bool format_into(std::span<char> out, const char* format, Args... args) {
  if (out.empty()) return false;
  const int written = std::snprintf(out.data(), out.size(), format, args...);
  return written >= 0 && static_cast<std::size_t>(written) < out.size();
}

// An XDG_RUNTIME_DIR we may use: absolute, a directory, ours. Its mode is not checked here:
// only our own subdirectory's is (Note [Stats directory]).
bool usable_runtime_directory(const char* path) {
  if (path == nullptr || path[0] != '/') return false;
  struct stat info {};
  if (stat(path, &info) != 0) return false;
  return S_ISDIR(info.st_mode) && info.st_uid == geteuid() && access(path, W_OK | X_OK) == 0;
}

}  // namespace

bool fallback_stats_directory_path(std::span<char> out) noexcept {
  return format_into(out, "/tmp/vramspill-%u", static_cast<unsigned>(geteuid()));
}

bool stats_directory_path(std::span<char> out) noexcept {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (usable_runtime_directory(runtime)) return format_into(out, "%s/vramspill", runtime);
  return fallback_stats_directory_path(out);
}

StatsDirectory open_stats_directory(const char* path, bool create) noexcept {
  StatsDirectory result;
  std::span<char> problem(result.problem);
  bool created = false;
  if (create) {
    if (mkdir(path, kStatsDirectoryMode) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      format_into(problem, "cannot create %s: %s", path, std::strerror(errno));
      return result;
    }
  }
  const int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT && !create) {
      result.missing = true;
    } else if (error == ELOOP || error == ENOTDIR) {
      format_into(problem, "%s is a symbolic link or not a directory; refusing to use it", path);
    } else {
      format_into(problem, "cannot open %s: %s", path, std::strerror(error));
    }
    return result;
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    format_into(problem, "cannot stat %s: %s", path, std::strerror(errno));
  } else if (!S_ISDIR(info.st_mode)) {
    format_into(problem, "%s is not a directory; refusing to use it", path);
  } else if (info.st_uid != geteuid()) {
    format_into(problem, "%s is owned by uid %u, not by this user (uid %u); refusing to use it",
                path, static_cast<unsigned>(info.st_uid), static_cast<unsigned>(geteuid()));
  } else if (created && fchmod(fd, kStatsDirectoryMode) != 0) {
    // mkdir's mode went through the umask, which can only have taken bits away; put them back.
    format_into(problem, "cannot set the mode of %s: %s", path, std::strerror(errno));
  } else if (!created && (info.st_mode & 077) != 0) {
    format_into(problem,
                "%s has mode %04o: other users can reach it (expected 0700); refusing to "
                "use it",
                path, static_cast<unsigned>(info.st_mode & 07777));
  } else {
    result.fd = fd;
    return result;
  }
  close(fd);
  return result;
}

}  // namespace vramspill::telemetry
