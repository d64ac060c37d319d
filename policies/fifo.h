// fifo: evict the blocks that arrived on the device first, whatever their use since; promote
// every block that fits the budget. Close to what the driver's unified memory does (it sees page
// faults and migrations, not each access, so it evicts by when memory was brought in), kept as
// the yardstick a use-aware policy must beat.
//
// Note [FIFO arrival]
// A block arrives when it comes to hold device granules while holding none: allocated on the
// device, or brought back by the mover after an eviction. It then joins the end of the queue; a
// partial move (more or fewer granules, but some) keeps its place. Launches change nothing, so
// `used` costs O(1) whatever it touches; the other events O(log n), a search
// O((victims + keep) log keep) (policies/ranked_index.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "policies/eviction_policy.h"
#include "policies/ranked_index.h"

namespace vramspill::policies {

class FifoPolicy final : public EvictionPolicy {
 public:
  static constexpr std::string_view kName = "fifo";

  explicit FifoPolicy(const PolicyOptions& options) noexcept : EvictionPolicy(options) {}

 private:
  std::string_view do_name() const noexcept override { return kName; }
  void do_allocated(BlockId block, uint64_t granules, bool on_device) override;
  void do_freed(BlockId block) override;
  void do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) override;
  void do_moved(BlockId block, uint64_t device_granules) override;
  std::vector<BlockId> do_choose_victims(uint64_t granules_needed,
                                         std::span<const BlockId> keep) override;
  bool do_should_promote(BlockId block) override;

  RankedIndex<uint64_t> queue_;  // rank: arrival number, unique
  uint64_t arrivals_ = 0;
};

}  // namespace vramspill::policies
