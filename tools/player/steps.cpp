#include "steps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace vramspill::player {
namespace {

constexpr size_t kWindow = 4096;        // launches compared at each lag, at most
constexpr double kNearBest = 0.95;      // of the best lag's matches, for a shorter lag to win
constexpr double kLeastMatching = 0.5;  // at the best lag, for the launches to repeat at all

uint64_t mix(uint64_t hash, uint64_t value) {
  // splitmix64's finaliser over the running hash: order matters, as it does for a launch.
  uint64_t x = hash ^ (value + 0x9E3779B97F4A7C15ULL + (hash << 6) + (hash >> 2));
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Each launch's stream and blocks, by the trace's keys: the same tensors at the same addresses
// step after step, where block indices differ for a block freed and allocated again.
std::vector<uint64_t> launch_signatures(const Plan& plan) {
  std::vector<uint64_t> signatures;
  signatures.reserve(plan.launches);
  for (const PlannedAction& action : plan.actions) {
    if (action.kind != PlannedAction::Kind::kLaunch) continue;
    uint64_t hash = mix(0, plan.streams[action.stream]);
    for (uint32_t i = 0; i < action.block_count; ++i)
      hash = mix(hash, plan.blocks[plan.launch_blocks[action.first_block + i]].key);
    signatures.push_back(hash);
  }
  return signatures;
}

double matching_at(std::span<const uint64_t> launches, size_t lag) {
  const size_t compared = std::min(kWindow, launches.size() - lag);
  const size_t first = launches.size() - lag - compared;
  size_t matches = 0;
  for (size_t i = first; i < first + compared; ++i) matches += launches[i] == launches[i + lag];
  return static_cast<double>(matches) / static_cast<double>(compared);
}

}  // namespace

Steps divide_into_steps(size_t launches, size_t steps, std::string how) {
  Steps result{{}, std::move(how)};
  for (size_t step = 1; step <= steps; ++step) result.ends.push_back(step * launches / steps);
  return result;
}

Period find_period(std::span<const uint64_t> launches) {
  std::vector<double> matching(launches.size() / 2 + 1, 0.0);
  double best = 0;
  for (size_t lag = 1; lag < matching.size(); ++lag) {
    matching[lag] = matching_at(launches, lag);
    best = std::max(best, matching[lag]);
  }
  if (best < kLeastMatching) return {};
  for (size_t lag = 1;; ++lag)
    if (matching[lag] >= kNearBest * best) return {lag, matching[lag]};
}

Steps find_steps(const Plan& plan) {
  const std::vector<uint64_t> signatures = launch_signatures(plan);
  const Period period = find_period(signatures);
  if (period.lag == 0)
    return divide_into_steps(plan.launches, 1,
                             "no repeating step found in the launches: played as one step "
                             "(--steps N divides the trace into N)");
  const auto steps = std::max<size_t>(
      1, static_cast<size_t>(std::lround(static_cast<double>(plan.launches) /
                                         static_cast<double>(period.lag))));
  char how[160];
  std::snprintf(how, sizeof how, "found: the launches repeat every %zu (%.0f%% of them alike)",
                period.lag, period.matching * 100);
  return divide_into_steps(plan.launches, steps, how);
}

}  // namespace vramspill::player
