#include "export_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string_view>
#include <vector>

#include "memory_viz_export.h"
#include "telemetry/trace_reader.h"

namespace vramspill::cli {
namespace {

constexpr const char* kProgram = "vramspill export";
constexpr int kCannotWrite = 1;
constexpr int kBadInput = 2;

// Writes `snapshot` to a new file beside `path`, then renames it over `path`, so that an export
// that fails leaves no half-written file (nor harms one that was there). Empty on success, else
// what went wrong.
std::string write_atomically(const MemoryVizSnapshot& snapshot, const std::string& path) {
  std::vector<char> temporary(path.begin(), path.end());
  for (const char c : std::string_view(".XXXXXX")) temporary.push_back(c);
  temporary.push_back('\0');
  const int fd = mkstemp(temporary.data());
  if (fd < 0) return "cannot create a file beside it: " + std::string(std::strerror(errno));
  // mkstemp makes it 0600; give it the mode any new file gets.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  close(fd);
  const std::string name = temporary.data();
  {
    std::ofstream out(name, std::ios::binary | std::ios::trunc);
    write_memory_viz(snapshot, out);
    out.close();
    if (!out) {
      const std::string problem = "cannot write " + name + ": " + std::strerror(errno);
      unlink(name.c_str());
      return problem;
    }
  }
  if (std::rename(name.c_str(), path.c_str()) != 0) {
    const std::string problem = std::strerror(errno);
    unlink(name.c_str());
    return problem;
  }
  return "";
}

// Says on standard error what of the trace did not make it into the export.
void warn_about(const telemetry::Trace& trace, const MemoryVizSnapshot& snapshot,
                const std::string& name) {
  if (!trace.complete) {
    std::cerr << kProgram << ": " << name
              << " ends without '# end': the process was killed or its trace stopped; exporting "
                 "what it holds\n";
  }
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
      "Evictions, promotions, refusals and each device's budget are annotations (the "
      "snapshot's external_annotations). A trace without its '# end' line (the job was killed) is "
      "exported as far as "
      "it goes, with a warning.\n\n"
      "Exit status: 0; 1 when the output cannot be written; 2 when the trace cannot be read "
      "or is not a valid trace (the message names the line).");
  return command;
}

int run_export_command(const ExportOptions& options) {
  telemetry::Trace trace;
  try {
    trace = telemetry::read_trace(options.trace);
  } catch (const telemetry::TraceError& error) {
    std::cerr << kProgram << ": " << error.what() << "\n";
    return kBadInput;
  }
  const MemoryVizSnapshot snapshot = build_memory_viz(trace);
  warn_about(trace, snapshot, options.trace);
  const std::string problem = write_atomically(snapshot, options.output);
  if (!problem.empty()) {
    std::cerr << kProgram << ": cannot write " << options.output << ": " << problem << "\n";
    return kCannotWrite;
  }
  std::cout << "wrote " << options.output << ": " << snapshot.allocations << " allocation(s), "
            << snapshot.annotations.size() << " annotation(s); open it at "
            << "https://pytorch.org/memory_viz\n";
  return 0;
}

}  // namespace vramspill::cli
