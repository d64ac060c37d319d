// Chart.js (https://www.chartjs.org, MIT licence), the minified UMD build Debian's
// libjs-chart.js ships, which `vramspill report` puts in every page so that the page needs
// nothing else. tools/cli/CMakeLists.txt finds the file and embed_text.cmake turns it into
// chart_js.cpp at build time; its API is that of Chart.js 3 (the version is in its first lines).
// report_page.js, the page's own script, is embedded the same way.
#pragma once

namespace vramspill::cli {

extern const char kChartJs[];
extern const char kReportPageJs[];

}  // namespace vramspill::cli
