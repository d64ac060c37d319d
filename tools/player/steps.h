// Where a trace's training steps end, so that the player can time each one.
//
// Note [Finding the steps]
// A trace has no step markers: the shim sees launches, not the job's loop. But a training loop
// launches the same kernels on the same tensors every step, and a framework's caching allocator
// hands the same addresses back, so the launches repeat with the step as their period. The
// player compares each launch (its stream and the keys of its blocks) with the launch `lag`
// earlier, for every lag up to half the trace, over the last 4 096 launches at most; the step
// is the shortest lag at which at least 95% as many launches match as at the best lag (a lag of
// two or three steps matches about as well as one; fewer than half matching at the best lag:
// no step found, and the trace is one step). The trace then holds round(launches / step) steps.
// Steps are equal slices of the launches: step k is launches [k n / N, (k+1) n / N), so N steps
// cover every launch whether or not the trace ends on a step's end. On the H200 trace of a
// PyTorch training job (15 steps, 3 180 launches) launches repeat best at 633 (93%) and 211 (92%)
// launches: the step is 211, and the trace 15 steps of 212 launches. `--steps N` skips the
// search and takes N slices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "play_plan.h"

namespace vramspill::player {

struct Steps {
  std::vector<size_t> ends;  // launches played by the end of each step; the last is all of them
  std::string how;           // how they were found, for the player's output
};

// `steps` equal slices of `launches` launches (Note [Finding the steps]); steps >= 1.
Steps divide_into_steps(size_t launches, size_t steps, std::string how);

// The steps of `plan` (Note [Finding the steps]).
Steps find_steps(const Plan& plan);

// The shortest lag at which `launches` repeat (Note [Finding the steps]), with the share of
// launches that match at it; lag 0 when they do not repeat. Each launch is a signature: equal
// launches have equal signatures.
struct Period {
  size_t lag = 0;
  double matching = 0;
};
Period find_period(std::span<const uint64_t> launches);

}  // namespace vramspill::player
