// Durations for people, as `vramspill stat` prints them. Byte counts come from util/bytes.h, so
// they are spelled exactly as in the shim's log lines.
#pragma once

#include <cstdint>
#include <string>

namespace vramspill::cli {

// "0.4 s", "12 s", "3m05s", "2h07m", "3d04h".
std::string format_duration(double seconds);

}  // namespace vramspill::cli
