#include "export_command.h"

#include <iostream>
#include <optional>
#include <ostream>

#include "atomic_file.h"
#include "memory_viz_export.h"
#include "trace_input.h"

namespace vramspill::cli {
namespace {

constexpr const char* kProgram = "vramspill export";
constexpr int kCannotWrite = 1;
constexpr int kBadInput = 2;

// Says on standard error what of the trace did not make it into the export.
void warn_about(const MemoryVizSnapshot& snapshot, const std::string& name) {
  if (snapshot.unmatched_frees != 0) {
    std::cerr << kProgram << ": " << name << ": left out " << snapshot.unmatched_frees
              << " free(s) of allocations the trace does not hold (is it damaged?)\n";
  }
  if (snapshot.repeated_allocations != 0) {
    std::cerr << kProgram << ": " << name << ": left out " << snapshot.repeated_allocations
              << " allocation(s) of a key the trace shows live already (is it damaged?)\n";
  }
}

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
  command->add_option("-o,--output", options.output, "The file to write (replaced if it exists).")
      ->required()
      ->type_name("FILE");
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
  warn_about(snapshot, options.trace);
  const std::string problem = write_file_atomically(
      options.output, [&](std::ostream& out) { write_memory_viz(snapshot, out); });
  if (!problem.empty()) {
    std::cerr << kProgram << ": cannot write " << options.output << ": " << problem << "\n";
    return kCannotWrite;
  }
  // An annotation is two entries of external_annotations, its START and its END.
  const std::size_t annotations = snapshot.annotations.size();
  std::cout << "wrote " << options.output << ": " << snapshot.allocations << " allocation(s), "
            << annotations << " annotation(s) (" << 2 * annotations
            << " entries of external_annotations, a START and an END each); open it at "
            << "https://pytorch.org/memory_viz\n";
  return 0;
}

}  // namespace vramspill::cli
