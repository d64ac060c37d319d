// The page `vramspill report` writes (tools/cli/report_html.h, report_json.h): text from the
// trace is escaped for HTML and for the JSON inside a <script> element, and the page holds what
// it needs (Chart.js, its data, its script) and says what the trace does not record.
#include "report_html.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "report_json.h"

namespace vramspill::cli {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t found = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++found;
  }
  return found;
}

std::string page_of(const JobReport& report, const PageOptions& options = {}) {
  std::ostringstream out;
  write_report_html(report, options, out);
  return out.str();
}

JobReport hostile_report() {
  std::istringstream text(
      "# vramspill trace 1\n# pid 7\n# start_unix_ns 1000\n"
      "# command python -c '</script><script>alert(1)</script>' & <!-- x\n"
      "0 device 0 1073741824 33554432\n1000 alloc 0 spill-host 0x7000 4096\n");
  return build_report(telemetry::parse_trace(text, "test.trace"));
}

TEST(ReportHtml, HtmlEscapeReplacesEveryMarkupCharacter) {
  EXPECT_EQ(html_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(html_escape("plain text"), "plain text");
}

TEST(ReportHtml, ScriptJsonStringsCannotEndTheScriptElement) {
  EXPECT_EQ(script_json_string("</script><!--&\"\\\n"),
            "\"\\u003c/script\\u003e\\u003c!--\\u0026\\\"\\\\\\u000a\"");
}

TEST(ReportHtml, ACommandFromTheTraceIsTextNeverMarkup) {
  const std::string page = page_of(hostile_report(), PageOptions{.title = "Job <b>"});
  // The error hook, Chart.js, the data and the page's script: no other script element.
  EXPECT_EQ(count(page, "<script"), 4u);
  EXPECT_EQ(count(page, "</script>"), 4u);
  EXPECT_NE(page.find("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&#39; &amp; &lt;!-- x"),
            std::string::npos);
  EXPECT_NE(page.find("<h1>Job &lt;b&gt;</h1>"), std::string::npos);
}

// Tiered mode's trace ends with its launch counts; over 1% unreadable, the page warns.
TEST(ReportHtml, ThePageSaysHowManyLaunchesCouldNotBeRead) {
  const auto page_for = [](const std::string& launches) {
    std::istringstream text(
        "# vramspill trace 1\n# pid 7\n# start_unix_ns 1000\n# command x\n"
        "0 device 0 1073741824 33554432\n" +
        launches);
    return page_of(build_report(telemetry::parse_trace(text, "test.trace")));
  };
  EXPECT_EQ(page_for("").find("kernel launches"), std::string::npos);
  EXPECT_NE(page_for("5 launches 1000 10\n")
                .find("<th>kernel launches</th><td>1000, of which 10 unreadable"),
            std::string::npos);
  EXPECT_NE(page_for("5 launches 1000 11\n")
                .find("<th>kernel launches</th><td class=\"warning\">1000, of which 11 unreadable"),
            std::string::npos);
}

TEST(ReportHtml, ThePageHoldsItsChartsDataAndSaysWhatIsNotRecorded) {
  JobReport report = hostile_report();
  const std::string page = page_of(report);
  EXPECT_NE(page.find("Chart.js v3"), std::string::npos);  // embedded, not linked
  EXPECT_EQ(page.find(" src="), std::string::npos);
  // Memory and the spill are charted; with no tiered move, that chart is left out, and said.
  EXPECT_NE(page.find("<body data-charts-expected=\"2\">"), std::string::npos);
  for (const std::string id : {"bytes-0", "events-0"}) {
    EXPECT_NE(page.find("<canvas id=\"" + id + "\">"), std::string::npos) << id;
  }
  EXPECT_EQ(page.find("<canvas id=\"moved-0\">"), std::string::npos);
  EXPECT_NE(page.find("Not charted, as there is nothing to show: tiered moves (none),"),
            std::string::npos);
  EXPECT_NE(page.find("\"charts\":[\"bytes\",\"events\"]"), std::string::npos);
  EXPECT_NE(page.find("\"label\":\"spilled to the host pool\""), std::string::npos);
  EXPECT_NE(page.find("not recorded (the trace does not capture them)"), std::string::npos);
  EXPECT_NE(page.find("cut short"), std::string::npos);  // the trace has no '# end'
  report.complete = true;
  EXPECT_EQ(page_of(report).find("cut short"), std::string::npos);
}

}  // namespace
}  // namespace vramspill::cli
