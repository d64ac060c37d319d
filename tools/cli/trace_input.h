// How the commands that read a [trace] file (export, report, replay) read it: the same message
// for a trace that is not valid, and the same warning for one cut short.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trace_reader.h"

namespace vramspill::cli {

// The trace at `path`; nullopt, with the reader's message on standard error after `program`,
// when it cannot be read or is not valid. A trace without its '# end' line (or a binary one
// without its end record) is returned with a warning that the command goes on `doing` ("exporting",
// "drawing", ...) what it holds.
std::optional<telemetry::Trace> read_trace_for(std::string_view program, const std::string& path,
                                               std::string_view doing);

}  // namespace vramspill::cli
