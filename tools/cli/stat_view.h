// What `vramspill stat` prints for a set of processes: one block per process (pid, command, host
// figures, age of the figures) with a row per device. A pure function of its inputs, so the
// layout is tested without a terminal or a clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stats_reader.h"

namespace vramspill::cli {

// `now_unix_ns` is CLOCK_REALTIME, for "updated 0.4 s ago". An empty list renders as the line
// "no processes under vramspill".
std::string render_stats(const std::vector<telemetry::StatsSnapshot>& processes,
                         uint64_t now_unix_ns);

}  // namespace vramspill::cli
