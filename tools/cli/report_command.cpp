#include "report_command.h"

#include <iostream>

#include "atomic_file.h"
#include "report_html.h"
#include "run_report.h"
#include "trace_input.h"

namespace vramspill::cli {
namespace {

constexpr const char* kProgram = "vramspill report";
constexpr int kCannotWrite = 1;
constexpr int kBadInput = 2;

}  // namespace

CLI::App* add_report_command(CLI::App& app, ReportOptions& options) {
  CLI::App* command = app.add_subcommand(
      "report", "Draw a job's memory trace as one HTML page of charts, to open in a browser.");
  command->add_option("trace", options.trace, "The trace file.")->required()->type_name("TRACE");
  command->add_option("-o,--output", options.output, "The page to write (replaced if it exists).")
      ->required()
      ->type_name("FILE");
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
  const std::string problem = write_file_atomically(
      options.output, [&](std::ostream& out) { write_report_html(report, page, out); });
  if (!problem.empty()) {
    std::cerr << kProgram << ": cannot write " << options.output << ": " << problem << "\n";
    return kCannotWrite;
  }
  std::cout << "wrote " << options.output << ": " << report.devices.size() << " device(s), "
            << trace->events.size() << " event(s) over " << report.duration_s
            << " s; open it in a browser\n";
  return 0;
}

}  // namespace vramspill::cli
