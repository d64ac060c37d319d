// vramspill-exporter, the program behind `vramspill exporter` (exporter_command.h): its own
// command line, parsed as vramspill parses its commands'. Run directly too, e.g. from a systemd
// unit (README.md, "vramspill exporter").
#include <CLI/CLI.hpp>

#include "exporter_command.h"

namespace {

// As vramspill's (tools/cli/main.cpp): a usage error is 2, not CLI11's 100 and up.
constexpr int kUsageError = 2;

}  // namespace

int main(int argc, char** argv) {
  using namespace vramspill::cli;

  // Named as users call it: `vramspill exporter` execs this program.
  CLI::App app(kExporterSummary, "vramspill exporter");
  ExporterOptions options;
  add_exporter_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int status = app.exit(error);
    return status == 0 ? 0 : kUsageError;
  }
  return run_exporter_command(options);
}
