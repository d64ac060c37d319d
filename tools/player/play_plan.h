// What the workload player does with a trace (README.md, "The workload player"): the trace's
// allocations, frees and launches of one device, each block and stream given an index of the
// player's own, checked before anything runs. Driver-free, so tests build plans from text.
//
// A block is one allocation: a key the trace frees and allocates again is a new block. A launch
// (a `use` event) names blocks by their keys, which must be live; the same block named twice
// counts once, as it is touched once. Evictions and promotions are the recording shim's
// decisions and are left out (the shim under test makes its own), and so are refusals and the
// devices' budgets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "trace_reader.h"

namespace vramspill::player {

// A trace the player cannot play: "NAME: event N (KIND at T ns): what is wrong".
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PlannedBlock {
  uint64_t key = 0;    // the trace's key (the recorded job's pointer)
  uint64_t bytes = 0;
  size_t event = 0;    // its alloc event, counted from 1 in file order
};

struct PlannedAction {
  enum class Kind : uint8_t { kAlloc, kFree, kLaunch };
  Kind kind = Kind::kAlloc;
  uint32_t block = 0;        // alloc, free: into Plan::blocks
  uint32_t stream = 0;       // launch: into Plan::streams
  uint32_t first_block = 0;  // launch: its blocks are launch_blocks[first_block, + block_count)
  uint32_t block_count = 0;
};

struct Plan {
  int device = 0;                      // the trace's device these events are of
  std::vector<PlannedBlock> blocks;    // in allocation order
  std::vector<uint64_t> streams;       // the trace's stream numbers, in order of first use
  std::vector<PlannedAction> actions;  // in trace order
  std::vector<uint32_t> launch_blocks;
  size_t launches = 0;
  size_t frees = 0;
  // Left out: events of other devices, allocations of 0 bytes (and their frees), and the
  // recording shim's evictions, promotions and refusals.
  size_t other_device_events = 0;
  size_t empty_allocations = 0;
  size_t moves_ignored = 0;
};

// The plan of `trace`'s events on `device` (a trace device number). `name` names the trace in
// errors. Throws PlanError.
Plan make_plan(const telemetry::Trace& trace, int device, const std::string& name);

// The device of the trace's first allocation (0 when it has none): the one a plan plays by
// default.
int first_allocating_device(const telemetry::Trace& trace);

}  // namespace vramspill::player
