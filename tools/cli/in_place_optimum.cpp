#include "in_place_optimum.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "min_cost_flow.h"

namespace vramspill::cli {
namespace {

using Node = MinCostFlow::Node;

// A live block's place in the graph: its granules, and the node its next gap leaves from.
struct Chain {
  uint64_t granules = 0;
  Node last_out = 0;
};

}  // namespace

// Note [The in-place optimum]. The nodes, in time order: the time line's node before each step
// (the budget's units pass it), and for each event of a block at that step a node where the
// gap before the event arrives ("in", before the time line's next node, so that a unit held
// over that gap can return to the time line after the event) and one the gap after it leaves
// from ("out", after it, so that a unit can leave the time line to hold the block after the
// event). In -> out continues a stretch on the device at no cost.
uint64_t in_place_optimum_granules(const ReplayInput& input) {
  MinCostFlow graph;
  std::unordered_map<uint64_t, Chain> live;
  uint64_t all_in_place = 0;  // every use of every granule touched in place
  const Node source = graph.add_node();
  Node time = source;
  std::vector<std::pair<uint64_t, Node>> arrivals;  // (block, in node) of the step's events
  std::vector<uint64_t> departures;                 // blocks whose next gap starts at the step
  for (const ReplayStep& step : input.steps) {
    arrivals.clear();
    departures.clear();
    std::vector<uint64_t> blocks = step.blocks;
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    for (const uint64_t block : blocks) {
      if (step.kind == ReplayStep::Kind::kAlloc) {
        live[block] = {.granules = step.granules, .last_out = 0};
        departures.push_back(block);
        continue;
      }
      const auto found = live.find(block);
      if (found == live.end()) continue;
      Chain& chain = found->second;
      const Node in = graph.add_node();
      graph.add_edge(chain.last_out, in, chain.granules, -1);  // the gap held
      arrivals.emplace_back(block, in);
      if (step.kind == ReplayStep::Kind::kUse) {
        all_in_place += chain.granules;
        departures.push_back(block);
      }
    }
    const Node after = graph.add_node();
    graph.add_edge(time, after, input.budget_granules, 0);
    time = after;
    for (const auto& [block, in] : arrivals) graph.add_edge(in, time, live.at(block).granules, 0);
    for (const uint64_t block : departures) {
      Chain& chain = live.at(block);
      const Node out = graph.add_node();
      graph.add_edge(time, out, chain.granules, 1);  // a stretch on the device starts
      const auto arrived = std::find_if(arrivals.begin(), arrivals.end(), [&](const auto& arrival) {
        return arrival.first == block;
      });
      if (arrived != arrivals.end()) graph.add_edge(arrived->second, out, chain.granules, 0);
      chain.last_out = out;
    }
    if (step.kind == ReplayStep::Kind::kFree) {
      for (const uint64_t block : blocks) live.erase(block);
    }
  }
  // Held to the end, a block is never written back.
  const Node sink = graph.add_node();
  graph.add_edge(time, sink, input.budget_granules, 0);
  for (const auto& [block, chain] : live) graph.add_edge(chain.last_out, sink, chain.granules, -1);
  const MinCostFlow::Flow flow = graph.solve(source, sink, input.budget_granules);
  return all_in_place - static_cast<uint64_t>(-flow.cost);
}

}  // namespace vramspill::cli
