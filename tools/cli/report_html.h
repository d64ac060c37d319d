// The page `vramspill report` writes: one self-contained HTML file (Chart.js, from Debian's
// libjs-chart.js, is embedded at build time: chart_js.h) showing a job's report (run_report.h).
// The header, the summary and the table of the largest allocations are HTML written here, every
// text from the trace escaped; the charts are drawn in the browser by report_page.js from the
// data report_json.h writes. The page's script marks what it did on the document, for tests and
// for anyone who wonders why a chart is missing: <body data-charts-drawn="N"> once it has drawn
// N charts (data-charts-expected says how many there are), and <html data-js-error="..."> when a
// script failed.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "run_report.h"

namespace vramspill::cli {

struct PageOptions {
  std::string title = "vramspill report";
};

void write_report_html(const JobReport& report, const PageOptions& options, std::ostream& out);

// `text` with &, <, >, " and ' as character references.
std::string html_escape(std::string_view text);

}  // namespace vramspill::cli
