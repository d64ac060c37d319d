// Facts about this process that the shim's files record: the wall-clock time and the command.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramspill::telemetry {

// CLOCK_REALTIME in nanoseconds since the Unix epoch.
uint64_t realtime_ns() noexcept;

// /proc/self/cmdline into `command` (`size` bytes, at least 2), NUL-terminated, with the NULs
// between arguments and any control characters turned into spaces, truncated to fit; "?" when
// it cannot be read.
void read_command(char* command, std::size_t size) noexcept;

}  // namespace vramspill::telemetry
