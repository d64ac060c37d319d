#include "report_html.h"

#include <vector>
#include <cstdio>
#include <ctime>

#include "chart_js.h"
#include "report_json.h"
#include "util/bytes.h"

namespace vramspill::cli {
namespace {

constexpr std::string_view kStyle = R"css(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto;
       max-width: 1200px; padding: 0 16px; color: #1f2328; background: #fff; }
h1 { font-size: 24px; margin: 0 0 8px; }
h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
code.command { display: block; background: #f6f8fa; padding: 8px 10px; border-radius: 6px;
               white-space: pre-wrap; word-break: break-all; margin-bottom: 10px; }
table { border-collapse: collapse; font-size: 14px; margin: 6px 0 12px; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; text-align: left; }
th { background: #f6f8fa; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.warning { color: #9a6700; font-weight: 600; }
.muted { color: #59636e; }
.chart { position: relative; height: 340px; margin: 12px 0 20px; }
)css";

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f s", seconds);
  return text;
}

std::string wall_clock(uint64_t unix_ns) {
  const auto seconds = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm utc{};
  char text[40];
  if (gmtime_r(&seconds, &utc) == nullptr ||
      std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &utc) == 0) {
    return "unknown";
  }
  return text;
}

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

void row(std::ostream& out, std::string_view name, const std::string& value) {
  out << "<tr><th>" << html_escape(name) << "</th><td>" << html_escape(value) << "</td></tr>\n";
}

void write_header(const JobReport& report, const PageOptions& options, std::ostream& out) {
  out << "<h1>" << html_escape(options.title) << "</h1>\n<code class=\"command\">"
      << html_escape(report.command.empty() ? "(no command recorded)" : report.command)
      << "</code>\n<table>\n";
  row(out, "process", std::to_string(report.pid));
  row(out, "started", wall_clock(report.start_unix_ns));
  row(out, "duration", seconds_text(report.duration_s) + " (to the last event)");
  out << "<tr><th>trace</th><td>"
      << (report.complete ? "complete"
                          : "<span class=\"warning\">cut short: the process was killed or its "
                            "trace stopped; this shows what it holds</span>")
      << "</td></tr>\n";
  if (report.left_out_events != 0) {
    out << "<tr><th>left out</th><td class=\"warning\">" << report.left_out_events
        << " event(s) about allocations the trace does not show live (is it damaged?)</td></tr>\n";
  }
  if (report.launches) {
    // Note [Counting launches] in shim/core/use_tracker.h: over 1%, tiered mode decided blind.
    const uint64_t all = report.launches->launches,
                   unreadable = report.launches->unreadable_launches;
    out << "<tr><th>kernel launches</th><td" << (unreadable * 100 > all ? " class=\"warning\"" : "")
        << ">" << all << ", of which " << unreadable
        << " unreadable (taken as touching every tiered block)</td></tr>\n";
  }
  row(out, "call sites", "not recorded (the trace does not capture them)");
  out << "</table>\n";
}

std::string count_and_bytes(uint64_t count, uint64_t bytes, std::string_view what) {
  return std::to_string(count) + " (" + format_bytes(bytes) + " " + std::string(what) + ")";
}

void write_device(const DeviceReport& device, std::ostream& out) {
  const std::string id = std::to_string(device.device);
  out << "<section>\n<h2>Device " << id << "</h2>\n<table>\n";
  row(out, "budget",
      device.limit_bytes == 0
          ? "not recorded"
          : format_bytes(device.limit_bytes) + " of its " + format_bytes(device.total_bytes));
  row(out, "peak on the device", format_bytes(device.peak_on_device_bytes));
  for (std::size_t tier = 0; tier < kTierCount; ++tier) {
    if (device.peak_bytes[tier] == 0) continue;
    row(out, "peak " + std::string(tier_label(Tier(tier))), format_bytes(device.peak_bytes[tier]));
  }
  row(out, "allocations", std::to_string(device.allocations));
  row(out, "spills", count_and_bytes(device.spills, device.spilled_bytes, "in all"));
  row(out, "requests over the budget", std::to_string(device.refusals));
  row(out, "evictions to the host",
      count_and_bytes(device.evictions, device.evicted_bytes, "moved"));
  row(out, "promotions to the device",
      count_and_bytes(device.promotions, device.promoted_bytes, "moved"));
  out << "</table>\n";
  const std::vector<std::string_view> charts = charts_of(device);
  for (const std::string_view chart : charts) {
    out << "<div class=\"chart\"><canvas id=\"" << chart << "-" << id << "\"></canvas></div>\n";
  }
  if (charts.size() < 3) {
    out << "<p class=\"muted\">Not charted, as there is nothing to show:"
        << (device.bytes.empty() ? " memory (no allocations)," : "")
        << (device.evictions == 0 && device.promotions == 0 ? " tiered moves (none)," : "")
        << (device.refusals == 0 && device.spills == 0
                ? " requests over the budget and spills (none)."
                : "")
        << "</p>\n";
  }
  out << "</section>\n";
}

std::size_t charts_expected(const JobReport& report) {
  std::size_t count = 0;
  for (const DeviceReport& device : report.devices) count += charts_of(device).size();
  return count;
}

void write_largest(const JobReport& report, std::ostream& out) {
  out << "<section>\n<h2>Largest allocations</h2>\n";
  if (report.largest.empty()) {
    out << "<p class=\"muted\">The trace holds no allocations.</p>\n</section>\n";
    return;
  }
  if (report.allocations > report.largest.size()) {
    out << "<p class=\"muted\">The " << report.largest.size() << " largest of "
        << report.allocations << " allocations.</p>\n";
  }
  out << "<p class=\"muted\">Who made them: call sites are not recorded by the trace.</p>\n"
         "<table>\n<tr><th>size</th><th>route</th><th>device</th><th>address or handle</th>"
         "<th>allocated at</th><th>freed at</th><th>lifetime</th></tr>\n";
  for (const LargeAllocation& allocation : report.largest) {
    out << "<tr><td class=\"n\">" << html_escape(format_bytes(allocation.bytes)) << "</td><td>"
        << html_escape(core::route_token(allocation.route)) << "</td><td class=\"n\">"
        << allocation.device << "</td><td><code>" << hex(allocation.key)
        << "</code></td><td class=\"n\">" << seconds_text(allocation.allocated_s) << "</td>";
    if (allocation.freed_s) {
      out << "<td class=\"n\">" << seconds_text(*allocation.freed_s) << "</td><td class=\"n\">"
          << seconds_text(*allocation.freed_s - allocation.allocated_s) << "</td>";
    } else {
      out << "<td class=\"muted\">live at the end</td><td class=\"n\">&ge; "
          << seconds_text(report.duration_s - allocation.allocated_s) << "</td>";
    }
    out << "</tr>\n";
  }
  out << "</table>\n</section>\n";
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void write_report_html(const JobReport& report, const PageOptions& options, std::ostream& out) {
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"generator\" content=\"vramspill report\">\n<title>"
      << html_escape(options.title) << ": " << html_escape(report.command) << "</title>\n"
      << "<script>window.addEventListener('error', function (e) {\n"
         "  document.documentElement.dataset.jsError = String(e.message || e);\n});</script>\n"
      << "<style>" << kStyle << "</style>\n</head>\n<body data-charts-expected=\""
      << charts_expected(report) << "\">\n";
  write_header(report, options, out);
  for (const DeviceReport& device : report.devices) write_device(device, out);
  write_largest(report, out);
  out << "<script>\n" << kChartJs << "\n</script>\n";
  out << "<script type=\"application/json\" id=\"report-data\">";
  write_report_json(report, out);
  out << "</script>\n<script>\n" << kReportPageJs << "\n</script>\n</body>\n</html>\n";
}

}  // namespace vramspill::cli
