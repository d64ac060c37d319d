// Replays a recorded job's tiered blocks and launches (a [trace] file from tiered mode) through
// the eviction policies, offline, at any budget: what each policy would have moved, against the
// fewest fetches any policy could make (Belady's MIN), for `vramspill replay`.
//
// Note [The replay's model]
// The device is `budget` bytes of 2 MiB granules and nothing else; a block is the granules of one
// tiered allocation. The model does what tiered placement (shim/placement/tiered_placement.cpp)
// does, with the policy deciding:
// - alloc: room is made for the whole block (victims give up all their device granules, the
//   last only what the need leaves when the policy says so: Note [Evicting part of a block] in
//   policies/eviction_policy.h, which the shim does not offer yet), then as much of it as fits
//   is placed on the device, the rest on the host;
// - use (one launch and its blocks): the policy is told; each block with host granules is
//   promoted if the policy agrees, else touched in place over the link; a launch that promotes
//   also brings in the blocks the policy names ahead of their launches (Note [Promoting ahead] in
//   policies/eviction_policy.h); the victims are chosen with the launch's own blocks and those
//   kept, promotions that would not fit even with all of them gone (last first: those named
//   ahead, then the launch's own, which are touched in place) stay on the host, and only as many
//   victims are evicted as the rest need (the last in part, as at alloc);
// - free: the block's granules are gone.
// Not modelled: the host limit (the host takes every eviction), pooled granules, other
// allocations' share of the budget, and launches whose blocks were not all listed (more than 32,
// graphs): those run as the trace shows them.
//
// The yardstick: a policy's fetched granules (placed on the device at allocation, or promoted)
// against Belady's MIN over the granules: every allocation and every use needs each of its
// granules on the device, and MIN fetches the fewest (policies/belady.h). A policy that promotes
// every block it uses can never fetch fewer; one that touches blocks in place may, paying instead
// with every access crossing the link (its "in place" column). So the replay also counts what
// crossed the link (promoted, evicted, touched in place) against MIN with in-place access, a
// lower bound on it (Note [The in-place optimum] in in_place_optimum.h), which keeps its meaning
// at budgets where little fits and plain MIN fetches far more than policies that read in place.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "live_allocations.h"
#include "trace_reader.h"

namespace vramspill::cli {

// One device's tiered blocks and the submissions that touch them, in time order. A submission
// (a launch, copy or memset: the trace's use event) is what the model calls a launch.
struct ReplayStep {
  enum class Kind : uint8_t { kAlloc, kFree, kUse };
  Kind kind = Kind::kUse;
  uint64_t stream = 0;           // kUse
  std::vector<uint64_t> blocks;  // kAlloc, kFree: one block; kUse: the submission's blocks
  uint64_t granules = 0;         // kAlloc
};

struct ReplayInput {
  int device = 0;
  uint64_t budget_granules = 0;
  uint64_t blocks = 0;       // allocations
  uint64_t block_bytes = 0;  // their bytes, together
  uint64_t submissions = 0;  // use events: kernel launches, copies and memsets
  uint64_t recorded_evicted_bytes = 0;  // what the job itself moved (the trace's evict/promote)
  uint64_t recorded_promoted_bytes = 0;
  LeftOut left_out;  // tiered allocs and frees of a damaged trace
  std::vector<ReplayStep> steps;
};

// `trace`'s tiered blocks and uses on `device`; `budget_bytes` 0 takes the device's limit from
// the trace. Throws std::runtime_error when there is nothing to replay (no tiered block, no
// budget) or a block has no bytes (the reader refuses such a trace: Note [What a trace may
// hold] in trace_reader.h), saying why.
ReplayInput replay_input(const telemetry::Trace& trace, int device, uint64_t budget_bytes);

struct ReplayResult {
  std::string policy;
  uint64_t placed_granules = 0;    // new blocks' granules placed on the device
  uint64_t promoted_granules = 0;  // brought back to the device for a launch
  uint64_t evicted_granules = 0;   // sent to the host to make room
  uint64_t moves = 0;              // blocks moved, either way (each a copy and a remap)
  uint64_t windows = 0;            // allocations and launches that stopped for moves
  uint64_t late_promotions = 0;    // blocks promoted at the launch that uses them: it waits
  uint64_t ahead_promotions = 0;   // blocks promoted at an earlier launch's window
  uint64_t in_place_uses = 0;      // a launch's block left (partly) on the host
  uint64_t in_place_granules = 0;  // the host granules of those blocks, per use

  uint64_t fetched_granules() const { return placed_granules + promoted_granules; }
  // What crossed the link, as Note [The in-place optimum] (in_place_optimum.h) counts it.
  uint64_t link_granules() const {
    return promoted_granules + evicted_granules + in_place_granules;
  }
};

// `input` through the policy named `policy` (policies/registry.h; throws std::invalid_argument
// for an unknown name).
ReplayResult replay(const ReplayInput& input, std::string_view policy);

// The fewest granules any policy could fetch (Note [The replay's model]).
uint64_t optimal_fetched_granules(const ReplayInput& input);

}  // namespace vramspill::cli
