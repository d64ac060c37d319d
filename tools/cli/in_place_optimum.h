// MIN with in-place access, the yardstick of `vramspill replay` at budgets where plain MIN loses
// its meaning: the fewest bytes over the link when a block may be read on the host as well as
// brought in (policies/README.md; DESIGN's cost: a fetch and a write-back, or one crossing).
//
// Note [The in-place optimum]
// The cost is the granules that cross the link, counted as the replay counts a policy's (its
// link_granules()): each granule promoted (one crossing in), each evicted (one crossing out:
// tracking does not know what a kernel wrote, so every eviction writes back), and, for each
// launch, each host granule of its blocks that it touches in place (one crossing: the model
// takes a kernel to read or write each byte of its blocks once). A block created on the device
// or on the host crosses nothing; neither does a block freed, or still held at the end.
// Per granule, then, each use costs 1 unless the granule stays on the device from the use before
// it to the use after it (or to its free, or to the end): a use costs 1 - x_before * x_after,
// where x says whether the granule is held across the gap on each side of it. Fetching at a use
// and writing back at another costs the same as touching both in place: residency pays only for
// the uses strictly inside a stretch on the device.
// The minimum of that sum under the budget is a minimum-cost flow (min_cost_flow.h), exact and
// polynomial, over a relaxation of the replay's model: budget units flow along the time line of
// the trace's steps; a unit may leave it to hold one granule of a block over consecutive gaps
// between its events (entering costs 1, each gap held -1), and returns when the block is let go.
// Because the granules of a block are alike, a block's gaps are one edge each, of capacity its
// granules. Any schedule of the replay's model maps onto a flow of no greater cost (each stretch
// on the device cut to the uses it spans), so the optimum here is a lower bound on the link
// granules of every policy; it can be below what any policy reaches, for two relaxations:
// - blocks may be held in part, granule by granule, where policies move whole blocks (Note
//   [Whole blocks move] in policies/eviction_policy.h);
// - a launch is one point in time: the blocks it lets go and the blocks it brings in may share
//   room, where the replay keeps a launch's own blocks while it brings others in.
// It is not the optimum of the replay's model, which no polynomial method is known to give
// (caching with blocks of different sizes is NP-hard), and it is not comparable with plain MIN,
// which counts granules fetched and ignores write-backs.
#pragma once

#include <cstdint>

#include "trace_replay.h"

namespace vramspill::cli {

// The least link granules any schedule of the relaxation moves over `input` at its budget (Note
// [The in-place optimum]): a lower bound on every policy's ReplayResult::link_granules().
uint64_t in_place_optimum_granules(const ReplayInput& input);

}  // namespace vramspill::cli
