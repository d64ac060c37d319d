#include "export_command.h"

#include <iostream>
#include <optional>
#include <ostream>

#include "memory_viz_export.h"
#include "output_option.h"
#include "standard_output.h"
#include "trace_input.h"

namespace vramspill::cli {
namespace {

constexpr const char* kProgram = "vramspill export";
constexpr int kBadInput = 2;

}  // namespace

CLI::App* add_export_command(CLI::App& app, ExportOptions& options) {
  CLI::App* command =
      app.add_subcommand("export", "Convert a job's memory trace into a file other tools open.");
  command
      ->add_option("--format", options.format,
                   "What to write (default memory-viz): memory-viz, a PyTorch memory snapshot "
                   "(pickle) for https://pytorch.org/memory_viz.")
      ->check(CLI::IsMember({"memory-viz"}).description(""))
      ->type_name("FORMAT");
  command->add_option("trace", options.trace, "The trace file.")->required()->type_name("TRACE");
  add_output_option(*command, options.output, "The file");
  command->footer(
      "A job writes a trace when its policy sets [trace] file, or VRAMSPILL_TRACE_FILE is set "
      "(\"%p\" in the path becomes the process id): every allocation and free with its route "
      "(spilled and tiered ones included), requests over the budget, and tiered mode's "
      "evictions and promotions, with their times.\n\n"
      "memory-viz: open https://pytorch.org/memory_viz and drag the file in (it stays on your "
      "computer). Every allocation is a segment with one block; hover over one to see its "
      "\"stack\", which says what vramspill did with it: \"vramspill: spilled to ...\" for "
      "bytes spilled to host or managed memory, \"vramspill: tiered block\" for tiered mode, "
      "\"device memory (cuMemAlloc)\" and the like for memory that stayed on the device. "
      "Evictions, promotions, requests over the budget and each device's budget are "
      "annotations (the "
      "snapshot's external_annotations). A trace without its '# end' line (the job was killed) is "
      "exported as far as "
      "it goes, with a warning.\n\n"
      "Exit status: 0; 1 when the output cannot be written; 2 when the trace cannot be read "
      "or is not a valid trace (the message names the line).");
  return command;
}

int run_export_command(const ExportOptions& options) {
  const std::optional<telemetry::Trace> trace =
      read_trace_for(kProgram, options.trace, "exporting");
  if (!trace) return kBadInput;
  const MemoryVizSnapshot snapshot = build_memory_viz(*trace);
  warn_about_left_out(kProgram, options.trace, snapshot.left_out);
  if (!write_output(kProgram, options.output,
                    [&](std::ostream& out) { write_memory_viz(snapshot, out); }))
    return kCannotWrite;
  if (is_standard_output(options.output)) return 0;
  // An annotation is two entries of external_annotations, its START and its END.
  const std::size_t annotations = snapshot.annotations.size();
  std::cout << "wrote " << options.output << ": " << snapshot.allocations << " allocation(s), "
            << annotations << " annotation(s) (" << 2 * annotations
            << " entries of external_annotations, a START and an END each); open it at "
            << "https://pytorch.org/memory_viz\n";
  return exit_status_after_output(kProgram, 0);
}

}  // namespace vramspill::cli
