// The data of a `vramspill report` page's charts (run_report.h) as JSON, for the page's script
// (report_page.js) to draw. The JSON sits inside a <script> element, so every '<', '>' and '&'
// in it is written as a \u escape.
//
// Note [JSON inside a script element]
// An HTML parser ends a <script> element's text at the first "</script" in any case, and after
// "<!--" a "<script" changes how it looks for the end; JSON.parse reads "\u003c" as '<'. So the
// writer escapes '<' (and '>', '&', for good measure) in every string it writes, and numbers hold
// none: no trace, command line or route name can end the element early or inject markup.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "run_report.h"

namespace vramspill::cli {

// The charts a device has, by the prefix of their canvas's id: "bytes" (memory by tier) when it
// held any, "moved" (tiered moves) when something moved, "events" (requests over the budget and
// spills) when there were any. A chart with nothing to show is left out.
std::vector<std::string_view> charts_of(const DeviceReport& device);

// Writes {"end_s": ..., "devices": [{"device", "total", "limit", "bucket_s", "charts" (above),
// "samples" (the memory points before downsampling), "times", "tiers": [{"id", "label",
// "values"}] (the tiers that ever held bytes), "activity": {"start", "evicted", "promoted",
// "refusals", "spills"}}]}. Bytes are integers, times seconds.
void write_report_json(const JobReport& report, std::ostream& out);

// `text` as a JSON string that is safe inside a <script> element.
std::string script_json_string(std::string_view text);

}  // namespace vramspill::cli
