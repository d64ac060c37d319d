#include "policies/eviction_policy.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

namespace vramspill::policies {

void EvictionPolicy::allocated(BlockId block, uint64_t granules, bool on_device) {
  if (granules == 0) {
    return broken(stats_.invalid_events, "allocated with no granules: block", block);
  }
  const auto [it, inserted] = books_.try_emplace(block, Books{granules, on_device ? granules : 0});
  if (!inserted) return broken(stats_.invalid_events, "allocated while already live: block", block);
  // The block is recorded before do_allocated runs (which may read the books), and only stays if
  // it returns: a bad_alloc there leaves no trace of the block, not a block the books know and
  // the policy does not, which a later event would look up and not find.
  try {
    do_allocated(block, granules, on_device);
  } catch (...) {
    books_.erase(it);
    throw;
  }
  device_granules_total_ += it->second.device_granules;
}

void EvictionPolicy::freed(BlockId block) {
  const auto it = books_.find(block);
  if (it == books_.end()) return broken(stats_.invalid_events, "freed an unknown block", block);
  device_granules_total_ -= it->second.device_granules;
  books_.erase(it);
  do_freed(block);
}

void EvictionPolicy::used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) {
  ++stats_.launches;
  const auto unknown = std::ranges::find_if(blocks, [&](BlockId b) { return !books_.contains(b); });
  if (unknown == blocks.end()) return do_used(sequence, stream, blocks);
  // The rare path: copy the live blocks out, so that the fast one needs no copy.
  scratch_.clear();
  for (const BlockId block : blocks) {
    if (books_.contains(block)) {
      scratch_.push_back(block);
    } else {
      broken(stats_.invalid_events, "a launch used an unknown block", block);
    }
  }
  do_used(sequence, stream, scratch_);
}

void EvictionPolicy::moved(BlockId block, uint64_t device_granules) {
  Books* books = find(block);
  if (books == nullptr) return broken(stats_.invalid_events, "moved an unknown block", block);
  if (device_granules > books->granules) {
    return broken(stats_.invalid_events, "moved more granules than the block has: block", block);
  }
  device_granules_total_ = device_granules_total_ - books->device_granules + device_granules;
  books->device_granules = device_granules;
  do_moved(block, device_granules);
}

Victims EvictionPolicy::choose_victims(uint64_t granules_needed, std::span<const BlockId> keep,
                                       bool in_part) {
  ++stats_.victim_requests;
  Victims result;
  if (granules_needed == 0) {
    result.enough = true;
    return result;
  }
  std::vector<BlockId> kept(keep.begin(), keep.end());
  std::ranges::sort(kept);
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());

  may_evict_in_part_ = in_part;
  const std::vector<BlockId> proposed = do_choose_victims(granules_needed, keep);
  may_evict_in_part_ = false;
  std::unordered_set<BlockId> taken;
  taken.reserve(proposed.size());
  for (const BlockId block : proposed) {
    const Books* books = find(block);
    const char* problem = nullptr;
    if (books == nullptr) {
      problem = "chose a victim that is not live: block";
    } else if (books->device_granules == 0) {
      problem = "chose a victim with no device granules: block";
    } else if (std::ranges::binary_search(kept, block)) {
      problem = "chose a victim the launch keeps: block";
    } else if (!taken.insert(block).second) {
      problem = "chose the same victim twice: block";
    }
    if (problem != nullptr) {
      broken(stats_.invalid_decisions, problem, block);
      continue;
    }
    result.blocks.push_back(block);
    result.granules += books->device_granules;
  }
  stats_.victims_chosen += result.blocks.size();
  result.partial_last = in_part && do_evicts_in_part();
  result.enough = result.granules >= granules_needed;
  if (!result.enough) {
    ++stats_.short_requests;
    uint64_t kept_device = 0;
    for (const BlockId block : kept) kept_device += device_granules(block);
    if (device_granules_total_ - kept_device >= granules_needed) {
      broken(stats_.invalid_decisions, "chose too few victims though enough were evictable: need",
             granules_needed);
    }
  }
  return result;
}

bool EvictionPolicy::should_promote(BlockId block) {
  const Books* books = find(block);
  if (books == nullptr) {
    broken(stats_.invalid_events, "asked to promote an unknown block", block);
    return false;
  }
  if (books->device_granules == books->granules) {
    broken(stats_.invalid_events, "asked to promote a block with no host granules: block", block);
    return false;
  }
  bool promote = do_should_promote(block);
  if (promote && books->granules > capacity_granules_) {
    broken(stats_.invalid_decisions, "promoted a block larger than the budget: block", block);
    promote = false;
  }
  ++(promote ? stats_.promotions_agreed : stats_.promotions_refused);
  return promote;
}

std::vector<BlockId> EvictionPolicy::promote_ahead(uint64_t room_taken,
                                                   std::span<const BlockId> keep) {
  std::vector<BlockId> named = do_promote_ahead(room_taken, keep);
  if (named.empty()) return named;
  std::vector<BlockId> kept(keep.begin(), keep.end());
  std::ranges::sort(kept);
  std::unordered_set<BlockId> taken;
  std::vector<BlockId> valid;
  for (const BlockId block : named) {
    const Books* books = find(block);
    const char* problem = nullptr;
    if (books == nullptr) {
      problem = "named a block to promote ahead that is not live: block";
    } else if (books->device_granules == books->granules) {
      problem = "named a block to promote ahead with no host granules: block";
    } else if (books->granules > capacity_granules_) {
      problem = "named a block to promote ahead larger than the budget: block";
    } else if (std::ranges::binary_search(kept, block)) {
      problem = "named a block to promote ahead that the launch keeps: block";
    } else if (!taken.insert(block).second) {
      problem = "named the same block to promote ahead twice: block";
    }
    if (problem != nullptr) {
      broken(stats_.invalid_decisions, problem, block);
      continue;
    }
    valid.push_back(block);
  }
  stats_.promotions_ahead += valid.size();
  return valid;
}

uint64_t EvictionPolicy::granules(BlockId block) const noexcept {
  const auto it = books_.find(block);
  return it == books_.end() ? 0 : it->second.granules;
}

uint64_t EvictionPolicy::device_granules(BlockId block) const noexcept {
  const auto it = books_.find(block);
  return it == books_.end() ? 0 : it->second.device_granules;
}

EvictionPolicy::Books* EvictionPolicy::find(BlockId block) noexcept {
  const auto it = books_.find(block);
  return it == books_.end() ? nullptr : &it->second;
}

void EvictionPolicy::broken(uint64_t& counter, const char* problem, uint64_t value) {
  ++counter;
  std::snprintf(last_problem_, sizeof last_problem_, "%s %llu", problem,
                static_cast<unsigned long long>(value));
  if (mode_ == InvariantMode::kAbort) {
    const std::string_view policy = name();
    std::fprintf(stderr, "vramspill: eviction policy %.*s %s\n", static_cast<int>(policy.size()),
                 policy.data(), last_problem_);
    std::abort();
  }
}

}  // namespace vramspill::policies
