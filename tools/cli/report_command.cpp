#include "report_command.h"

#include <iostream>

#include "output_option.h"
#include "report_html.h"
#include "run_report.h"
#include "standard_output.h"
#include "trace_input.h"

namespace vramspill::cli {
namespace {

constexpr const char* kProgram = "vramspill report";
constexpr int kBadInput = 2;

}  // namespace

CLI::App* add_report_command(CLI::App& app, ReportOptions& options) {
  CLI::App* command = app.add_subcommand(
      "report", "Draw a job's memory trace as one HTML page of charts, to open in a browser.");
  command->add_option("trace", options.trace, "The trace file.")->required()->type_name("TRACE");
  add_output_option(*command, options.output, "The page");
  command->add_option("--title", options.title, "The page's heading (default: vramspill report).")
      ->type_name("TEXT");
  command->footer(
      "A job writes a trace when its policy sets [trace] file, or VRAMSPILL_TRACE_FILE is set "
      "(\"%p\" in the path becomes the process id).\n\n"
      "The page needs nothing else (Chart.js is inside it) and works offline. It shows the "
      "command, process and times; per device, the budget and a summary (peak bytes on the "
      "device and in each host tier, allocations, spills, requests over the budget, evictions and "
      "promotions "
      "with the bytes they moved) and up to three charts (one with nothing to show is left out, "
      "and the page says so): memory by tier over time (the driver's "
      "routes, tiered blocks on the device and on the host, spilled to the host pool, to host "
      "VMM memory, to managed memory) stacked under the budget; tiered bytes moved per time "
      "bucket; requests over the budget and spills per bucket. Then the largest allocations "
      "with their route and lifetime (the trace does not record call sites). Long jobs are "
      "drawn from at most " +
      std::to_string(ReportLimits{}.max_points) +
      " points per chart; a memory point is the instant of its time bucket when all tiers "
      "together held the most, so the stacked total is one the job really had and no peak is "
      "lost. "
      "A trace without its '# end' line (the job was killed) is drawn as far as it goes, with "
      "a warning.\n\n"
      "Exit status: 0; 1 when the page cannot be written; 2 when the trace cannot be read or "
      "is not a valid trace (the message names the line).");
  return command;
}

int run_report_command(const ReportOptions& options) {
  const std::optional<telemetry::Trace> trace = read_trace_for(kProgram, options.trace, "drawing");
  if (!trace) return kBadInput;
  const JobReport report = build_report(*trace);
  if (report.left_out_events != 0) {
    std::cerr << kProgram << ": " << options.trace << ": left out " << report.left_out_events
              << " event(s) about allocations the trace does not show live (is it damaged?)\n";
  }
  const PageOptions page{.title = options.title};
  if (!write_output(kProgram, options.output,
                    [&](std::ostream& out) { write_report_html(report, page, out); }))
    return kCannotWrite;
  if (is_standard_output(options.output)) return 0;
  std::cout << "wrote " << options.output << ": " << report.devices.size() << " device(s), "
            << trace->events.size() << " event(s) over " << report.duration_s
            << " s; open it in a browser\n";
  return exit_status_after_output(kProgram, 0);
}

}  // namespace vramspill::cli
