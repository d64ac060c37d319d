// workload_player: a vramspill trace played on any CUDA driver (README.md, "The workload
// player"). The trace becomes a plan (play_plan.h), the plan's launches are cut into steps
// (steps.h), and the device player makes every allocation, free and launch, times each step
// and verifies every block (device_player.h).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "device_player.h"
#include "driver_calls.h"
#include "play_plan.h"
#include "player_options.h"
#include "steps.h"
#include "trace_input.h"
#include "util/bytes.h"

namespace vramspill::player {
namespace {

constexpr const char* kProgram = "workload_player";

uint64_t total_bytes(const Plan& plan) {
  uint64_t bytes = 0;
  for (const PlannedBlock& block : plan.blocks) bytes += block.bytes;
  return bytes;
}

void describe(const PlayerOptions& options, const telemetry::Trace& trace, const Plan& plan,
              const Steps& steps) {
  std::printf("%s: %s (%s trace, %zu events): device %d, %zu blocks (%s), %zu frees, %zu "
              "launches on %zu stream%s\n",
              kProgram, options.trace.c_str(), trace.binary ? "binary" : "text",
              trace.events.size(), plan.device, plan.blocks.size(),
              format_bytes(total_bytes(plan)).c_str(), plan.frees, plan.launches,
              plan.streams.size(), plan.streams.size() == 1 ? "" : "s");
  if (plan.moves_ignored + plan.other_device_events + plan.empty_allocations != 0)
    std::printf("  left out: %zu evictions and promotions (the recording shim's), %zu events of "
                "other devices, %zu allocations of 0 bytes\n",
                plan.moves_ignored, plan.other_device_events, plan.empty_allocations);
  std::printf("steps: %zu of about %zu launches (%s)\n", steps.ends.size(),
              plan.launches / steps.ends.size(), steps.how.c_str());
}

// The blocks that failed verification, one line each; true when there were none.
bool report_verification(const DevicePlayer& device, const Plan& plan) {
  for (const VerificationFailure& failure : device.failures()) {
    const PlannedBlock& block = plan.blocks[failure.block];
    const Mismatch& mismatch = failure.mismatch;
    std::printf("verification FAILED: block %u (trace key 0x%llx, %s, allocated by event %zu) %s: "
                "element %llu holds 0x%016llx, expected 0x%016llx (%llu element%s differ%s)\n",
                failure.block, static_cast<unsigned long long>(block.key),
                format_bytes(block.bytes).c_str(), block.event,
                failure.at_free ? "at its free" : "at the end",
                static_cast<unsigned long long>(mismatch.element),
                static_cast<unsigned long long>(mismatch.found),
                static_cast<unsigned long long>(mismatch.expected),
                static_cast<unsigned long long>(mismatch.differing),
                mismatch.differing == 1 ? "" : "s", mismatch.differing == 1 ? "s" : "");
  }
  if (!device.failures().empty()) {
    std::printf("verification FAILED: %zu of %zu blocks verified\n", device.failures().size(),
                device.blocks_verified());
    return false;
  }
  std::printf("verified every byte of %zu blocks (%s), %zu of them at their frees\n",
              device.blocks_verified(), format_bytes(device.bytes_verified()).c_str(),
              device.blocks_verified() - device.live_blocks());
  return true;
}

// The mean of the steps after the first, which also fills the blocks it allocates (the first
// alone when it is the only one).
void report_time(const std::vector<double>& step_ms, bool simulated) {
  if (step_ms.empty()) return;
  const size_t first = step_ms.size() > 1 ? 1 : 0;
  double sum = 0;
  for (size_t step = first; step < step_ms.size(); ++step) sum += step_ms[step];
  const double mean = sum / static_cast<double>(step_ms.size() - first);
  char steps[64];
  if (step_ms.size() <= 2) {
    std::snprintf(steps, sizeof steps, "step %zu", step_ms.size());
  } else {
    std::snprintf(steps, sizeof steps, "mean of steps 2-%zu", step_ms.size());
  }
  std::printf("%s_ms_per_step %.4f (%s, %s)\n", simulated ? "modeled" : "measured", mean, steps,
              simulated ? "modeled by simcuda, not measured" : "measured by CUDA events");
}

// Plays the first `played_steps` of `steps`, printing each; their times in milliseconds.
std::vector<double> play_steps(DevicePlayer& device, const Plan& plan, const Steps& steps,
                               size_t played_steps, bool quiet) {
  const auto started = std::chrono::steady_clock::now();
  std::vector<double> step_ms;
  size_t action = 0;
  size_t launches = 0;
  for (size_t step = 0; step < played_steps; ++step) {
    const size_t first_launch = launches;
    // A step ends with its last launch: the allocations and frees after it open the next, but
    // for the trace's last step, which has them all.
    const bool last_of_trace = step + 1 == steps.ends.size();
    while (action < plan.actions.size() && (launches < steps.ends[step] || last_of_trace)) {
      launches += plan.actions[action].kind == PlannedAction::Kind::kLaunch;
      device.play(plan.actions[action++]);
    }
    step_ms.push_back(device.end_step());
    if (!quiet)
      std::printf("step %zu/%zu: launches %zu-%zu, %.3f ms\n", step + 1, played_steps,
                  first_launch + 1, launches, step_ms.back());
  }
  const double host_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("played %zu launches as %llu kernels in %.1f s of host time\n", launches,
              static_cast<unsigned long long>(device.kernel_launches()), host_seconds);
  return step_ms;
}

int play(const PlayerOptions& options) {
  const auto trace = cli::read_trace_for(kProgram, options.trace, "playing");
  if (!trace) return kBadInput;
  Plan plan;
  try {
    plan = make_plan(*trace, options.trace_device.value_or(first_allocating_device(*trace)),
                     options.trace);
  } catch (const PlanError& error) {
    std::fprintf(stderr, "%s: %s\n", kProgram, error.what());
    return kBadInput;
  }
  const Steps steps =
      options.steps ? divide_into_steps(plan.launches, *options.steps, "given by --steps")
                    : find_steps(plan);
  describe(options, *trace, plan, steps);
  const size_t played_steps = std::min(steps.ends.size(), options.play_steps.value_or(SIZE_MAX));

  DevicePlayer device(plan, {options.kernels.empty() ? nullptr : options.kernels.c_str(),
                             options.verify_at_free});
  std::printf("playing %zu of %zu steps on %s (%s), times %s\n", played_steps, steps.ends.size(),
              device.device_name().c_str(), format_bytes(device.device_bytes()).c_str(),
              device.simulated() ? "modeled by simcuda, not measured" : "measured by CUDA events");
  std::fflush(stdout);
  const std::vector<double> step_ms = play_steps(device, plan, steps, played_steps, options.quiet);
  std::printf("play_end_unix_ns %lld\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count()));
  if (options.self_test)
    std::printf("self-test: flipping one bit of %s\n", device.corrupt_one_element().c_str());
  device.verify_live_blocks();
  const bool verified = report_verification(device, plan);
  report_time(step_ms, device.simulated());
  return verified ? kVerified : kMismatch;
}

}  // namespace
}  // namespace vramspill::player

int main(int argc, char** argv) {
  using namespace vramspill::player;
  const ParsedOptions parsed = parse_player_options(argc, argv);
  if (parsed.exit_status) return *parsed.exit_status;
  try {
    return play(parsed.options);
  } catch (const DriverError& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", kProgram, error.what());
    return kDriverFailed;
  }
}
