// Whether a write stays within the process's file size limit (RLIMIT_FSIZE, `ulimit -f`).
//
// Note [The file size limit]
// A write to a regular file that starts at or past RLIMIT_FSIZE raises SIGXFSZ, whose default
// action kills the process (with a core dump); one that crosses the limit is cut short at it, so
// the next write raises the signal. The log, the trace and the stats file are the shim's, so a
// limit they reach must stop them, never the job: before each write to a regular file, the
// writer checks that the write would end within the limit and otherwise takes it as EFBIG, which
// stops that file as a full disk does. Pipes, terminals and devices have no such limit.
#pragma once

#include <cstdint>

namespace vramspill {

// True when a write to a regular file ending at byte `end` stays within the soft RLIMIT_FSIZE
// (or when the limit cannot be read: the write then goes ahead as it would without the shim).
bool within_file_size_limit(uint64_t end) noexcept;

}  // namespace vramspill
