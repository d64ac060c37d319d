// vramspill, the command-line tool (README.md, "Using the shim"): `run` starts a job under the
// shim, `stat` shows the jobs running under it, `doctor` checks the machine for spilling,
// `exporter` serves the jobs' figures to Prometheus, `export` converts a job's trace, `replay`
// runs it through the policies, `report` draws it. Each subcommand lives in its own file; this
// one only parses the command line and hands over.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "doctor_command.h"
#include "export_command.h"
#include "exporter_launcher.h"
#include "replay_command.h"
#include "report_command.h"
#include "run_command.h"
#include "stat_command.h"

#ifndef VRAMSPILL_VERSION
#error "the build defines VRAMSPILL_VERSION (tools/cli/CMakeLists.txt)"
#endif

namespace {

// CLI11's own exit codes for usage errors are 100 and up; a usage error here is 2, as for most
// Unix tools (and as `run` reports an invalid configuration).
constexpr int kUsageError = 2;

}  // namespace

int main(int argc, char** argv) {
  using namespace vramspill::cli;

  CLI::App app(
      "vramspill: run CUDA programs with a device-memory budget, spilling what does not "
      "fit to host memory.",
      "vramspill");
  app.set_version_flag("--version", std::string("vramspill ") + VRAMSPILL_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Run `vramspill COMMAND --help` for a command's options. The shim itself is "
      "configured by a TOML policy and VRAMSPILL_* variables: see README.md.");
  RunOptions run_options;
  StatOptions stat_options;
  DoctorOptions doctor_options;
  ExportOptions export_options;
  ReplayOptions replay_options;
  ReportOptions report_options;
  CLI::App* run = add_run_command(app, run_options);
  CLI::App* stat = add_stat_command(app, stat_options);
  CLI::App* doctor = add_doctor_command(app, doctor_options);
  CLI::App* exporter = add_exporter_command(app);
  CLI::App* export_trace = add_export_command(app, export_options);
  CLI::App* replay = add_replay_command(app, replay_options);
  CLI::App* report = add_report_command(app, report_options);

  // Note [Where the command starts]: CLI11 parses only what comes before `run`'s command.
  // Note [The exporter is a program of its own]: CLI11 parses nothing after `exporter` either.
  int parsed_count = argc;
  std::vector<std::string> command;
  int exporter_arguments = argc;  // where the arguments after `exporter` start
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument == "exporter") {
      parsed_count = exporter_arguments = i + 1;
      break;
    }
    if (argument == "run") {
      const CommandStart start = find_command_start(argc, argv, i + 1);
      parsed_count = start.after_separator ? start.index - 1 : start.index;
      command.assign(argv + start.index, argv + argc);
      break;
    }
    if (argument.empty() || argument[0] != '-') {  // another subcommand, or a typo
      const std::initializer_list<const CLI::App*> commands = {
          run, stat, doctor, exporter, export_trace, replay, report};
      if (std::ranges::none_of(
              commands, [&](const CLI::App* known) { return known->get_name() == argument; })) {
        std::string names;
        for (const CLI::App* known : commands)
          names += (names.empty() ? "" : ", ") + known->get_name();
        std::fprintf(stderr,
                     "vramspill: unknown command '%s': expected one of %s (vramspill --help)\n",
                     argv[i], names.c_str());
        return kUsageError;
      }
      break;
    }
  }

  try {
    app.parse(parsed_count, argv);
  } catch (const CLI::ParseError& error) {
    const int status = app.exit(error);
    return status == 0 ? 0 : kUsageError;
  }
  if (run->parsed()) return run_run_command(run_options, command);
  if (stat->parsed()) return run_stat_command(stat_options);
  if (doctor->parsed()) return run_doctor_command(doctor_options);
  if (exporter->parsed())
    return exec_exporter(argv + exporter_arguments, argc - exporter_arguments);
  if (export_trace->parsed()) return run_export_command(export_options);
  if (replay->parsed()) return run_replay_command(replay_options);
  if (report->parsed()) return run_report_command(report_options);
  return kUsageError;  // require_subcommand(1) makes this unreachable
}
