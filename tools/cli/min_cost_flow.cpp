#include "min_cost_flow.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <stdexcept>
#include <utility>

namespace vramspill::cli {
namespace {

constexpr int64_t kUnreached = std::numeric_limits<int64_t>::max();
constexpr uint32_t kNoLevel = std::numeric_limits<uint32_t>::max();

}  // namespace

MinCostFlow::Node MinCostFlow::add_node() {
  edges_.emplace_back();
  return static_cast<Node>(edges_.size() - 1);
}

void MinCostFlow::add_edge(Node from, Node to, uint64_t capacity, int64_t cost) {
  if (from >= to || to >= edges_.size()) {
    throw std::invalid_argument("min-cost flow: an edge must point to a later node");
  }
  const auto forward = static_cast<uint32_t>(edges_[from].size());
  const auto backward = static_cast<uint32_t>(edges_[to].size());
  edges_[from].push_back({to, backward, capacity, cost});
  edges_[to].push_back({from, forward, 0, -cost});
}

bool MinCostFlow::shortest_paths(Node source, Node sink) {
  using Entry = std::pair<int64_t, Node>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  std::fill(distance_.begin(), distance_.end(), kUnreached);
  distance_[source] = 0;
  queue.push({0, source});
  while (!queue.empty()) {
    const auto [distance, node] = queue.top();
    queue.pop();
    if (distance != distance_[node]) continue;
    for (const Edge& edge : edges_[node]) {
      if (edge.capacity == 0) continue;
      const int64_t reduced = edge.cost + potential_[node] - potential_[edge.to];
      if (distance + reduced < distance_[edge.to]) {
        distance_[edge.to] = distance + reduced;
        queue.push({distance_[edge.to], edge.to});
      }
    }
  }
  if (distance_[sink] == kUnreached) return false;
  // Capping at the sink's distance keeps every residual edge's reduced cost non-negative,
  // including those of nodes this search did not settle.
  for (std::size_t node = 0; node < edges_.size(); ++node) {
    potential_[node] += std::min(distance_[node], distance_[sink]);
  }
  return true;
}

bool MinCostFlow::admissible(Node node, const Edge& edge) const {
  return edge.capacity > 0 && edge.cost + potential_[node] == potential_[edge.to];
}

uint64_t MinCostFlow::blocking_flow(Node source, Node sink, uint64_t limit) {
  // Iterative, so that a path as long as the trace needs no deep stack: advance along the level
  // graph, augment at the sink and go back to the first saturated edge, retreat from dead ends.
  std::fill(next_edge_.begin(), next_edge_.end(), 0);
  std::vector<std::pair<Node, uint32_t>> path;  // (node, index of the edge taken out of it)
  uint64_t sent = 0;
  Node node = source;
  while (sent < limit) {
    if (node == sink) {
      uint64_t pushed = limit - sent;
      for (const auto& [from, index] : path)
        pushed = std::min(pushed, edges_[from][index].capacity);
      std::size_t saturated = path.size();
      for (std::size_t step = 0; step < path.size(); ++step) {
        Edge& edge = edges_[path[step].first][path[step].second];
        edge.capacity -= pushed;
        edges_[edge.to][edge.reverse].capacity += pushed;
        if (edge.capacity == 0 && saturated == path.size()) saturated = step;
      }
      sent += pushed;
      node = path[saturated].first;
      path.resize(saturated);
      continue;
    }
    std::vector<Edge>& out = edges_[node];
    uint32_t& index = next_edge_[node];
    while (index < out.size() &&
           (level_[out[index].to] != level_[node] + 1 || !admissible(node, out[index])))
      ++index;
    if (index < out.size()) {
      path.emplace_back(node, index);
      node = out[index].to;
      continue;
    }
    if (path.empty()) break;  // the source is a dead end: the level graph is blocked
    level_[node] = kNoLevel;  // a dead end: never entered again in this level graph
    node = path.back().first;
    path.pop_back();
    ++next_edge_[node];
  }
  return sent;
}

MinCostFlow::Flow MinCostFlow::solve(Node source, Node sink, uint64_t wanted) {
  const std::size_t nodes = edges_.size();
  // The first potentials: distances from the source in the nodes' (topological) order.
  potential_.assign(nodes, kUnreached);
  potential_[source] = 0;
  for (std::size_t node = 0; node < nodes; ++node) {
    if (potential_[node] == kUnreached) continue;
    for (const Edge& edge : edges_[node]) {
      if (edge.capacity > 0)
        potential_[edge.to] = std::min(potential_[edge.to], potential_[node] + edge.cost);
    }
  }
  // A node the source cannot reach never joins a path; any finite potential will do.
  for (int64_t& potential : potential_) {
    if (potential == kUnreached) potential = 0;
  }
  distance_.resize(nodes);
  level_.resize(nodes);
  next_edge_.resize(nodes);

  Flow flow;
  while (flow.units < wanted && shortest_paths(source, sink)) {
    // Every path of reduced cost 0 is a shortest one: a blocking flow over them, level by level,
    // until none is left.
    for (;;) {
      std::fill(level_.begin(), level_.end(), kNoLevel);
      level_[source] = 0;
      std::queue<Node> frontier;
      frontier.push(source);
      while (!frontier.empty()) {
        const Node node = frontier.front();
        frontier.pop();
        for (const Edge& edge : edges_[node]) {
          if (level_[edge.to] != kNoLevel || !admissible(node, edge)) continue;
          level_[edge.to] = level_[node] + 1;
          frontier.push(edge.to);
        }
      }
      if (level_[sink] == kNoLevel) break;
      const uint64_t pushed = blocking_flow(source, sink, wanted - flow.units);
      flow.units += pushed;
      flow.cost += static_cast<int64_t>(pushed) * (potential_[sink] - potential_[source]);
      if (flow.units == wanted) break;
    }
  }
  return flow;
}

}  // namespace vramspill::cli
