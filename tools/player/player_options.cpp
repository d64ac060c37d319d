#include "player_options.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>

namespace vramspill::player {
namespace {

constexpr const char* kDescription =
    "Plays a vramspill trace ([trace] file, text or binary) on any CUDA driver: its allocations\n"
    "and frees at their sizes and in order, and each launch as vs_touch, a kernel launched as\n"
    "cudart launches a framework's (a CUkernel; some blocks bare parameters, the others in a\n"
    "3.8 KiB struct) that reads and writes every 8-byte element of the blocks the launch named.\n"
    "The trace's evictions and promotions are left out: a shim under test makes its own. Every\n"
    "block is verified element by element when the trace frees it and at the end. Prints each\n"
    "step's time from CUDA events: measured on a GPU, modeled on simcuda (never measured).\n"
    "\n"
    "Exit status: 0 every byte verified; 1 a driver call failed (the message names it);\n"
    "2 a bad option or trace (the message names the file and the line or event); 3 a block\n"
    "failed verification (the message names the block and the element).\n";

}  // namespace

ParsedOptions parse_player_options(int argc, char** argv) {
  ParsedOptions parsed;
  PlayerOptions& options = parsed.options;
  CLI::App app(kDescription, "workload_player");
  app.add_option("trace", options.trace, "The trace to play.")->required()->type_name("TRACE");
  std::string steps = "auto";
  app.add_option("--steps", steps,
                 "How many training steps the trace holds, to time each: N divides its launches "
                 "into N equal steps; auto (the default) finds the step from the launches' "
                 "repetition.")
      ->type_name("N|auto");
  size_t play_steps = 0;
  app.add_option("--play-steps", play_steps,
                 "Play only the first K steps (and their allocations and frees), then verify.")
      ->check(CLI::PositiveNumber)
      ->type_name("K");
  int trace_device = 0;
  app.add_option("--trace-device", trace_device,
                 "The trace's device to play (default: that of its first allocation); it is "
                 "played on device 0.")
      ->check(CLI::NonNegativeNumber)
      ->type_name("D");
  app.add_option("--kernels", options.kernels,
                 "The module image with vs_touch (build/simcuda/vs_kernels.fatbin); needed on a "
                 "GPU, optional on simcuda, where any image loads.")
      ->check(CLI::ExistingFile)
      ->type_name("PATH");
  app.add_flag("!--no-verify-at-free", options.verify_at_free,
               "Free blocks without verifying them first (live blocks are still verified at the "
               "end). Verifying copies the block back inside the step's time.");
  app.add_flag("--self-test", options.self_test,
               "Before the final verification, flip one bit of one element; the player must "
               "then report it (exit 3).");
  app.add_flag("--quiet", options.quiet, "No line per step.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    parsed.exit_status = app.exit(error) == 0 ? kVerified : kBadInput;
    return parsed;
  }
  if (steps != "auto") {
    size_t value = 0;
    const auto [end, error] = std::from_chars(steps.data(), steps.data() + steps.size(), value);
    if (error != std::errc() || end != steps.data() + steps.size() || value == 0) {
      std::fprintf(stderr,
                   "workload_player: --steps '%s': expected a whole number from 1, or auto\n",
                   steps.c_str());
      parsed.exit_status = kBadInput;
      return parsed;
    }
    options.steps = value;
  }
  if (app.count("--play-steps") != 0) options.play_steps = play_steps;
  if (app.count("--trace-device") != 0) options.trace_device = trace_device;
  return parsed;
}

}  // namespace vramspill::player
