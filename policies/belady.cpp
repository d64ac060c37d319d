#include "policies/belady.h"

#include <iterator>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace vramspill::policies {

uint64_t belady_misses(std::span<const BlockId> uses, uint64_t capacity_blocks) {
  constexpr size_t kNever = std::numeric_limits<size_t>::max();
  // next_use[i]: where uses[i]'s block is used again, or kNever.
  std::vector<size_t> next_use(uses.size(), kNever);
  std::unordered_map<BlockId, size_t> later;
  for (size_t i = uses.size(); i-- > 0;) {
    const auto [it, inserted] = later.try_emplace(uses[i], i);
    if (!inserted) {
      next_use[i] = it->second;
      it->second = i;
    }
  }

  // The device, ordered by next use: the last element is the one to evict. A resident block's
  // entry is keyed by the index of its coming use, so a hit finds it as (i, block).
  std::set<std::pair<size_t, BlockId>> device;
  uint64_t misses = 0;
  for (size_t i = 0; i < uses.size(); ++i) {
    if (device.erase({i, uses[i]}) == 0) {
      ++misses;
      if (capacity_blocks == 0) continue;
      if (device.size() == capacity_blocks) device.erase(std::prev(device.end()));
    }
    device.insert({next_use[i], uses[i]});
  }
  return misses;
}

}  // namespace vramspill::policies
