// Minimum-cost flow on a graph whose nodes are numbered in a topological order, for the replay's
// in-place optimum (in_place_optimum.h), which is such a graph: every edge points forward in time.
//
// Successive shortest paths with potentials (the primal-dual method): the first potentials come
// from one pass over the nodes in order (the graph is acyclic, so negative costs need no
// Bellman-Ford), then each phase runs Dijkstra on reduced costs and pushes a blocking flow
// (Dinic's level graph) along every shortest path at once. Each phase raises the length of the
// shortest path, which the integer costs bound, so the phases are few when costs are small.
#pragma once

#include <cstdint>
#include <vector>

namespace vramspill::cli {

class MinCostFlow {
 public:
  using Node = uint32_t;

  // A new node; nodes must be added so that every edge goes from an earlier node to a later one.
  Node add_node();
  // An edge `from` -> `to` carrying up to `capacity` units at `cost` each; `from` < `to`
  // (std::invalid_argument otherwise).
  void add_edge(Node from, Node to, uint64_t capacity, int64_t cost);

  struct Flow {
    uint64_t units = 0;  // sent from source to sink: `wanted`, or all that fits
    int64_t cost = 0;    // the least any flow of `units` units costs
  };
  // Sends up to `wanted` units from `source` to `sink` at the least cost. Runs once per graph.
  Flow solve(Node source, Node sink, uint64_t wanted);

 private:
  struct Edge {
    Node to;
    uint32_t reverse;  // index of the residual twin in edges_[to]
    uint64_t capacity;
    int64_t cost;
  };

  // Shortest reduced distances from `source` (Dijkstra); whether `sink` is reachable.
  bool shortest_paths(Node source, Node sink);
  // Whether `edge`, out of `node`, has room and reduced cost 0 (it lies on a shortest path).
  bool admissible(Node node, const Edge& edge) const;
  // Sends up to `limit` units from `source` to `sink` along admissible edges that each go one
  // level deeper (Dinic's blocking flow); what it sent.
  uint64_t blocking_flow(Node source, Node sink, uint64_t limit);

  std::vector<std::vector<Edge>> edges_;
  std::vector<int64_t> potential_;
  std::vector<int64_t> distance_;
  std::vector<uint32_t> level_;
  std::vector<uint32_t> next_edge_;  // Dinic's current edge per node
};

}  // namespace vramspill::cli
