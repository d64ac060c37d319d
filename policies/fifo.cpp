#include "policies/fifo.h"

namespace vramspill::policies {

void FifoPolicy::do_allocated(BlockId block, uint64_t /*granules*/, bool on_device) {
  queue_.add(block, arrivals_++, on_device);
}

void FifoPolicy::do_freed(BlockId block) { queue_.remove(block); }

void FifoPolicy::do_used(uint64_t /*sequence*/, uint32_t /*stream*/,
                         std::span<const BlockId> /*blocks*/) {
  // Use does not count: Note [FIFO arrival].
}

void FifoPolicy::do_moved(BlockId block, uint64_t device_granules) {
  const bool resident = device_granules > 0;
  if (resident && !queue_.resident(block)) {
    queue_.rerank(block, [&](uint64_t& arrival) { arrival = arrivals_++; });  // Note [FIFO arrival]
  }
  queue_.set_resident(block, resident);
}

std::vector<BlockId> FifoPolicy::do_choose_victims(uint64_t granules_needed,
                                                   std::span<const BlockId> keep) {
  return queue_.first(granules_needed, keep, [&](BlockId b) { return device_granules(b); });
}

bool FifoPolicy::do_should_promote(BlockId block) { return granules(block) <= capacity_granules(); }

}  // namespace vramspill::policies
