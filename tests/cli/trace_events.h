// Trace events built by hand, for the tests of the tools that read a [trace] file.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "trace_reader.h"

namespace vramspill::cli::testing {

inline telemetry::TraceEvent event(uint64_t time_ns, telemetry::TraceEventKind kind,
                                   core::Route route, uint64_t key, uint64_t bytes,
                                   int device = 0) {
  telemetry::TraceEvent made;
  made.time_ns = time_ns;
  made.kind = kind;
  made.device = device;
  made.route = route;
  made.key = key;
  made.bytes = bytes;
  return made;
}

// A submission on stream 7 that touches the tiered blocks at `bases`.
inline telemetry::TraceEvent use_event(uint64_t time_ns, std::vector<uint64_t> bases) {
  telemetry::TraceEvent made =
      event(time_ns, telemetry::TraceEventKind::kUse, core::Route::kTiered, 0, 0);
  made.stream = 7;
  made.bases = std::move(bases);
  return made;
}

}  // namespace vramspill::cli::testing
