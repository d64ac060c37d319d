#include "stat_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <thread>
#include <vector>

#include "standard_output.h"
#include "stat_view.h"
#include "stats_scan.h"
#include "stats_reader.h"

namespace vramspill::cli {
namespace {

using telemetry::StatsEntry;
using telemetry::StatsSnapshot;
using telemetry::StatsState;

constexpr const char* kProgram = "vramspill stat";

uint64_t realtime_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(now.tv_nsec);
}

// The live processes (files of dead ones are removed); problems go to standard error, each once
// per run of the command.
std::vector<StatsSnapshot> live_processes(const StatOptions& options,
                                          std::vector<std::string>& reported) {
  std::vector<StatsSnapshot> processes;
  for (StatsEntry& entry :
       scan_stats_directories(stats_directories(options.directory), kProgram, reported)) {
    if (entry.state != StatsState::kLive) continue;
    if (options.pid != 0 && entry.snapshot.pid != static_cast<uint64_t>(options.pid)) continue;
    processes.push_back(std::move(entry.snapshot));
  }
  return processes;
}

}  // namespace

CLI::App* add_stat_command(CLI::App& app, StatOptions& options) {
  CLI::App* stat = app.add_subcommand(
      "stat", "Show the processes running under vramspill and their memory figures, like top.");
  stat->add_flag("--once", options.once,
                 "Print the figures once and exit (the default when standard output is not a "
                 "terminal).");
  stat->add_option("-n,--interval", options.interval_seconds,
                   "Seconds between refreshes (default 2).")
      ->check(CLI::Range(0.1, 3600.0).description(""))
      ->type_name("SECONDS");
  stat->add_option("-p,--pid", options.pid, "Show only this process.")
      ->check(CLI::PositiveNumber.description(""))
      ->type_name("PID");
  stat->add_option("--directory", options.directory,
                   "Read the stats files in DIR, which must exist, instead of the default "
                   "locations.")
      ->check(CLI::ExistingDirectory.description(""))
      ->type_name("DIR");
  stat->footer(
      "Each process under the shim publishes its figures in a file only its user can read: "
      "$XDG_RUNTIME_DIR/vramspill/<pid>.stats when XDG_RUNTIME_DIR is set, else "
      "/tmp/vramspill-<uid>/<pid>.stats. stat reads both places. A process holds a lock on its "
      "file while it runs, in whatever PID namespace; files nobody holds, left by processes "
      "that were killed, are deleted. A file stat cannot read (damaged, cut short, another "
      "version) is skipped with a message on standard error.\n\n"
      "Per process: how long it has run, how old its figures are, and its host memory: the "
      "pinned host pool, the host bytes holding spilled allocations, the host limit. Per device: "
      "held (device memory the job holds now), peak (the most it held), limit (the budget minus "
      "the reserve), total (the device's memory), managed and host (bytes spilled to managed "
      "memory and to the pinned host pool, now), spills (allocations spilled so far), refused "
      "(allocations over the budget that failed with OUT_OF_MEMORY so far; spilled ones are not "
      "counted). In tiered mode, the bytes moved each way, the remap windows and their time, "
      "and per device where the tiered blocks' granules are now. Figures are updated twice a "
      "second, all from the same instant.\n\n"
      "Exit status: 0; 1 when --pid names no process under vramspill, or standard output "
      "cannot be written.");
  return stat;
}

int run_stat_command(const StatOptions& options) {
  std::vector<std::string> reported;
  const bool refresh = !options.once && isatty(STDOUT_FILENO) == 1;
  const auto interval = std::chrono::duration<double>(options.interval_seconds);
  while (true) {
    const std::vector<StatsSnapshot> processes = live_processes(options, reported);
    std::string text;
    if (options.pid != 0 && processes.empty())
      text = "no process " + std::to_string(options.pid) + " under vramspill\n";
    else
      text = render_stats(processes, realtime_ns());
    if (!refresh) {
      std::cout << text;
      return exit_status_after_output(kProgram, options.pid != 0 && processes.empty() ? 1 : 0);
    }
    // Home, clear the screen, redraw: what top does, without taking over the terminal.
    std::cout << "\033[H\033[2J"
              << "vramspill stat: every " << options.interval_seconds << " s, Ctrl-C to quit\n\n"
              << text;
    if (!flush_standard_output(kProgram)) return kCannotWrite;
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace vramspill::cli
