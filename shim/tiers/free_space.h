// The free ranges of the pinned host pool, indexed for address-ordered best fit with coalescing
// (Note [The pool's own suballocator] in tiers/host_pool.h says why this and not mimalloc).
//
// Plain bookkeeping over integers: it never touches the memory it describes (the ranges may be
// device-visible pinned pages, or PROT_NONE fakes in a benchmark), and it is not thread-safe (the
// pool calls it under its lock). Ranges of different regions are never merged: a region is pinned
// and unpinned whole, so give_back() takes the bounds of the region the range belongs to.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace vramspill::tiers {

struct Range {
  uint64_t start = 0;
  uint64_t bytes = 0;
  uint64_t end() const { return start + bytes; }
};

class FreeSpace {
 public:
  // Adds [start, start + bytes) as one free range (a newly pinned region). Throws std::bad_alloc,
  // leaving the index unchanged.
  void add(uint64_t start, uint64_t bytes);

  // Best fit: the smallest free range of at least `bytes`, the lowest-addressed among equals; the
  // block is cut from its low end and the rest stays free. nullopt if no range is large enough.
  // Never allocates (the split reuses the taken range's nodes), so never throws.
  std::optional<uint64_t> take(uint64_t bytes) noexcept;

  // Frees [start, start + bytes), merging it with free neighbours inside the region
  // [region_start, region_end); returns the merged free range. Allocates (and may throw
  // std::bad_alloc, leaving the index unchanged) only when neither neighbour is free.
  Range give_back(uint64_t start, uint64_t bytes, uint64_t region_start, uint64_t region_end);

  // Removes the free range that is exactly [start, start + bytes) (a region about to be
  // unpinned); false if there is no such range.
  bool remove(uint64_t start, uint64_t bytes) noexcept;
  // Removes every free range inside [start, end) (a region the driver freed under the pool).
  void remove_within(uint64_t start, uint64_t end) noexcept;

  uint64_t free_bytes() const noexcept { return free_bytes_; }
  uint64_t largest() const noexcept { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  std::size_t ranges() const noexcept { return by_address_.size(); }

 private:
  std::map<uint64_t, uint64_t> by_address_;          // start -> bytes
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (bytes, start): best fit is lower_bound
  uint64_t free_bytes_ = 0;
};

}  // namespace vramspill::tiers
