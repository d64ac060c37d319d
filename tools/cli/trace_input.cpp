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

}  // namespace vramspill::cli
