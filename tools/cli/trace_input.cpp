#include "trace_input.h"

#include <iostream>

namespace vramspill::cli {

std::optional<telemetry::Trace> read_trace_for(std::string_view program, const std::string& path,
                                               std::string_view doing) {
  try {
    telemetry::Trace trace = telemetry::read_trace(path);
    if (!trace.complete) {
      std::cerr << program << ": " << path << " ends without "
                << (trace.binary ? "its end record" : "'# end'")
                << ": the process was killed or its trace stopped; " << doing << " what it holds\n";
    }
    return trace;
  } catch (const telemetry::TraceError& error) {
    std::cerr << program << ": " << error.what() << "\n";
    return std::nullopt;
  }
}

void warn_about_left_out(std::string_view program, const std::string& path,
                         const LeftOut& left_out) {
  if (left_out.unmatched_frees != 0) {
    std::cerr << program << ": " << path << ": left out " << left_out.unmatched_frees
              << " free(s) of allocations the trace does not hold (is it damaged?)\n";
  }
  if (left_out.repeated_allocations != 0) {
    std::cerr << program << ": " << path << ": left out " << left_out.repeated_allocations
              << " allocation(s) of a key the trace shows live already (is it damaged?)\n";
  }
}

}  // namespace vramspill::cli
