// How the commands that read a [trace] file (export, report, replay) read it: the same message
// for a trace that is not valid, and the same warnings for one cut short or damaged.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "live_allocations.h"
#include "trace_reader.h"

namespace vramspill::cli {

// The trace at `path`; nullopt, with the reader's message on standard error after `program`,
// when it cannot be read or is not valid. A trace without its '# end' line (or a binary one
// without its end record) is returned with a warning that the command goes on `doing` ("exporting",
// "drawing", ...) what it holds.
std::optional<telemetry::Trace> read_trace_for(std::string_view program, const std::string& path,
                                               std::string_view doing);

// Says on standard error, after `program` and the trace's `path`, what of the trace at `path`
// was `left_out` (Note [Allocations a trace shows live] in live_allocations.h); nothing when
// nothing was.
void warn_about_left_out(std::string_view program, const std::string& path,
                         const LeftOut& left_out);

}  // namespace vramspill::cli
