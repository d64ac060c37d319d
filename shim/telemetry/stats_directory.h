// Where stats files live, and opening that directory safely. Shared by the writer in the shim
// (telemetry/stats_file.h) and the reader in `vramspill stat` (tools/cli/stats_reader.h), so both
// agree on the place and on what counts as trustworthy.
//
// Note [Stats directory]
// The directory is `$XDG_RUNTIME_DIR/vramspill` when XDG_RUNTIME_DIR is an absolute path to a
// directory owned by this user (systemd's per-user tmpfs, mode 0700), else
// `/tmp/vramspill-<uid>`. /tmp is shared with every other user, so the second one may have been
// created first by someone else, or be a symbolic link planted to make us write (and later
// unlink) files elsewhere. The directory is therefore created with mode 0700 and opened with
// O_NOFOLLOW | O_DIRECTORY, and the descriptor (not the path) is checked: a directory that is not
// owned by this user, or that other users can enter or list, is refused, and stats are off for
// the process (the job runs on; the log says why). Files are then opened relative to that
// descriptor, so the path cannot be swapped between the check and the use.
//
// Everything here is noexcept and allocation-free (fixed buffers): the writer runs inside the
// shim, behind its C boundary.
#pragma once

#include <cstddef>
#include <span>

namespace vramspill::telemetry {

// Permissions of the directory and of each file.
inline constexpr unsigned kStatsDirectoryMode = 0700;
inline constexpr unsigned kStatsFileMode = 0600;

// The directory stats go to for this process's environment (Note [Stats directory]); nothing is
// created. False if `out` is too small (PATH_MAX always suffices).
bool stats_directory_path(std::span<char> out) noexcept;

// The fallback, `/tmp/vramspill-<uid>`, whatever XDG_RUNTIME_DIR says: `vramspill stat` also
// looks there, for jobs started without XDG_RUNTIME_DIR (cron, ssh without a session, sudo).
bool fallback_stats_directory_path(std::span<char> out) noexcept;

struct StatsDirectory {
  int fd = -1;             // open directory, O_CLOEXEC; -1 when refused or missing
  bool missing = false;    // it does not exist (only when not asked to create it)
  char problem[320] = {};  // why fd is -1 (not set when missing), one line
};

// Opens `path` as the stats directory, creating it (mode 0700) when `create` is true, and checks
// it is a real directory owned by this user with no group or other permissions. The caller
// closes `fd`.
StatsDirectory open_stats_directory(const char* path, bool create) noexcept;

}  // namespace vramspill::telemetry
