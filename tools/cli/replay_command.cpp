#include "replay_command.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "in_place_optimum.h"
#include "policies/registry.h"
#include "standard_output.h"
#include "trace_input.h"
#include "trace_replay.h"
#include "util/bytes.h"
#include "util/sizes.h"

namespace vramspill::cli {
namespace {

constexpr const char* kProgram = "vramspill replay";
constexpr int kBadInput = 2;
constexpr uint64_t kGranuleBytes = uint64_t{2} << 20;

std::string granule_bytes(uint64_t granules) { return format_bytes(granules * kGranuleBytes); }

// One row of the table, cell by cell (policy, fetched, vs MIN, link, vs MIN-ip, promoted,
// evicted, moves, stops, late, in place); empty cells stay blank.
void print_row(const std::array<std::string, 11>& cells) {
  std::printf("  %-9s %12s %7s %12s %8s %12s %12s %7s %6s %11s %14s\n", cells[0].c_str(),
              cells[1].c_str(), cells[2].c_str(), cells[3].c_str(), cells[4].c_str(),
              cells[5].c_str(), cells[6].c_str(), cells[7].c_str(), cells[8].c_str(),
              cells[9].c_str(), cells[10].c_str());
}

// `fetched` as a multiple of the optimum's, e.g. "1.25x".
std::string ratio_to(uint64_t fetched, uint64_t optimum) {
  if (optimum == 0) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx",
                static_cast<double>(fetched) / static_cast<double>(optimum));
  return text;
}

// The optima a policy is measured against: plain MIN's fetches, and MIN with in-place access's
// link granules.
struct Optima {
  uint64_t fetched = 0;
  uint64_t link = 0;
};

// The policies to replay: those named, each checked against the registry, or every one;
// nullopt after saying which name is unknown.
std::optional<std::vector<std::string>> chosen_policies(const std::vector<std::string>& named) {
  const std::span<const std::string_view> known = policies::policy_names();
  if (named.empty()) return std::vector<std::string>(known.begin(), known.end());
  for (const std::string& name : named) {
    if (std::ranges::find(known, name) != known.end()) continue;
    std::string valid;
    for (const std::string_view one : known)
      valid += (valid.empty() ? "" : ", ") + std::string(one);
    std::cerr << kProgram << ": --policy '" << name << "': no such policy (valid: " << valid
              << ")\n";
    return std::nullopt;
  }
  return named;
}

// The memory of `device` as the trace's device event recorded it; 0 when it has none.
uint64_t device_memory(const telemetry::Trace& trace, int device) {
  for (const telemetry::TraceEvent& event : trace.events) {
    if (event.kind == telemetry::TraceEventKind::kDevice && event.device == device)
      return event.bytes;
  }
  return 0;
}

// --budget in bytes: a size, or a percentage of the device's memory (0: the job's own budget);
// nullopt after saying what is wrong.
std::optional<uint64_t> budget_bytes(const std::string& text, int device, uint64_t memory) {
  if (text.empty()) return 0;
  const auto wrong = [&](const std::string& why) {
    std::cerr << kProgram << ": --budget '" << text << "': " << why << "\n";
    return std::nullopt;
  };
  uint64_t bytes = 0;
  if (const std::optional<double> percent = parse_percent(text)) {
    if (memory == 0)
      return wrong("the trace records no memory size for device " + std::to_string(device) +
                   ", so a percentage means nothing: give a size such as 20GiB");
    if (*percent <= 0 || *percent > 1) return wrong("expected a percentage from above 0 to 100%");
    bytes = static_cast<uint64_t>(*percent * static_cast<double>(memory));
  } else if (const std::optional<uint64_t> size = parse_size(text)) {
    bytes = *size;
  } else {
    return wrong(
        "expected a size such as 512MiB, 20GiB or 1.5GB, or a percentage of the "
        "device's memory such as 50%");
  }
  if (bytes < kGranuleBytes)
    return wrong("expected at least 2MiB, one granule (such as 512MiB, 20GiB, 1.5GB or 50%)");
  if (memory != 0 && bytes > memory)
    return wrong("more than device " + std::to_string(device) + "'s " + format_bytes(memory) +
                 " of memory");
  return bytes;
}

void print_result(const ReplayResult& result, const Optima& optima) {
  const uint64_t promotions = result.late_promotions + result.ahead_promotions;
  print_row(
      {result.policy, granule_bytes(result.fetched_granules()),
       ratio_to(result.fetched_granules(), optima.fetched), granule_bytes(result.link_granules()),
       ratio_to(result.link_granules(), optima.link), granule_bytes(result.promoted_granules),
       granule_bytes(result.evicted_granules), std::to_string(result.moves),
       std::to_string(result.windows),
       std::to_string(result.late_promotions) + " / " + std::to_string(promotions),
       std::to_string(result.in_place_uses) + " / " + granule_bytes(result.in_place_granules)});
}

}  // namespace

CLI::App* add_replay_command(CLI::App& app, ReplayOptions& options) {
  CLI::App* command = app.add_subcommand(
      "replay", "Replay a tiered-mode job's trace through the eviction policies, offline.");
  command->add_option("trace", options.trace, "The trace file.")->required()->type_name("TRACE");
  command->add_option("--device", options.device, "The device whose blocks to replay (default 0).")
      ->check(CLI::NonNegativeNumber)
      ->type_name("N");
  command
      ->add_option("--budget", options.budget,
                   "The device budget to replay at: a size such as 24GiB, or a percentage of "
                   "the device's memory as the trace records it, such as 50% (default: the one "
                   "the job had). At least 2MiB, at most the device's memory.")
      ->type_name("SIZE");
  command
      ->add_option("--policy", options.policies,
                   "A policy to replay (repeat for more; default: every one).")
      ->type_name("NAME");
  command->footer(
      "The trace comes from a job run in tiered mode with [trace] file (or VRAMSPILL_TRACE_FILE) "
      "set: it lists every tiered block and the blocks each submission (a kernel launch, copy "
      "or memset) touched. Each policy then decides again what to evict and what to bring "
      "back, in a model of tiered mode: the device is the budget's 2 MiB granules, a new block "
      "is placed on the device as far as room can be made, a submission's blocks are brought "
      "in if the policy agrees or touched in place over the link if not. The first line counts "
      "the submissions that touched tiered blocks, not the job's kernel launches (which "
      "`report` shows). An allocation at an address the trace shows live already, or a free "
      "of one it does not, is left out with a warning, as by `export`.\n\n"
      "Columns: fetched = granules placed on the device at allocation or promoted, and that as "
      "a multiple of MIN's; link = bytes over the link (promoted, evicted and touched in "
      "place), and that as a multiple of MIN-ip's; promoted and evicted = bytes moved each "
      "way; moves = blocks moved "
      "(each a copy and a remap); stops = allocations and submissions that stopped for moves; "
      "late = blocks promoted at the submission that uses them, which waits for the copy, of "
      "all promoted (the others were brought in ahead, at an earlier stop: learned does this "
      "once it has found the job's period); in place = submissions that left a block on the "
      "host, and its host bytes summed over them. MIN is Belady's optimum: the fewest bytes any "
      "policy that brings in what it uses can fetch (a policy that touches blocks in place may "
      "fetch less, and pays with its in-place bytes). MIN-ip is MIN with in-place access: the "
      "fewest bytes over the link when a block may also be read on the host, a lower bound "
      "computed exactly on a relaxation of the model (blocks may be held in part), which keeps "
      "its meaning when little fits. 'recorded' is what the job itself moved.\n\n"
      "Not modelled: the host limit, pooled granules, and allocations outside tiered mode's "
      "blocks.\n\n"
      "Exit status: 0; 1 when standard output cannot be written; 2 when the trace cannot be "
      "read or is not a valid trace (the message names the line), holds no tiered block, or an "
      "option is wrong.");
  return command;
}

int run_replay_command(const ReplayOptions& options) {
  const std::optional<std::vector<std::string>> names = chosen_policies(options.policies);
  if (!names) return kBadInput;
  const std::optional<telemetry::Trace> trace =
      read_trace_for(kProgram, options.trace, "replaying");
  if (!trace) return kBadInput;
  const std::optional<uint64_t> budget =
      budget_bytes(options.budget, options.device, device_memory(*trace, options.device));
  if (!budget) return kBadInput;
  try {
    const ReplayInput input = replay_input(*trace, options.device, *budget);
    warn_about_left_out(kProgram, options.trace, input.left_out);
    std::vector<ReplayResult> results;
    for (const std::string& name : *names) results.push_back(replay(input, name));
    // The launches, copies and memsets that touched tiered blocks: not the kernel launches
    // `report` and the shim's summary count.
    std::printf("%s, device %d: %llu tiered blocks (%s), %llu submissions, budget %s%s\n",
                options.trace.c_str(), input.device, static_cast<unsigned long long>(input.blocks),
                format_bytes(input.block_bytes).c_str(),
                static_cast<unsigned long long>(input.submissions),
                granule_bytes(input.budget_granules).c_str(), *budget == 0 ? " (the job's)" : "");
    const Optima optima{.fetched = optimal_fetched_granules(input),
                        .link = in_place_optimum_granules(input)};
    print_row({"policy", "fetched", "vs MIN", "link", "vs MIN-ip", "promoted", "evicted", "moves",
               "stops", "late", "in place"});
    for (const ReplayResult& result : results) print_result(result, optima);
    print_row({"MIN", granule_bytes(optima.fetched), "1.00x", "", "", "", "", "", "", "", ""});
    print_row({"MIN-ip", "", "", granule_bytes(optima.link), "1.00x", "", "", "", "", "", ""});
    print_row({"recorded", "", "", "", "", format_bytes(input.recorded_promoted_bytes),
               format_bytes(input.recorded_evicted_bytes), "", "", "", ""});
  } catch (const std::exception& error) {  // no tiered blocks, no budget
    std::cerr << kProgram << ": " << options.trace << ": " << error.what() << "\n";
    return kBadInput;
  }
  return exit_status_after_output(kProgram, 0);
}

}  // namespace vramspill::cli
