#include "tiers/free_space.h"

namespace vramspill::tiers {

void FreeSpace::add(uint64_t start, uint64_t bytes) {
  if (bytes == 0) return;
  const auto [it, inserted] = by_address_.emplace(start, bytes);
  if (!inserted) return;  // already free: a caller bug, but never index one range twice
  try {
    by_size_.emplace(bytes, start);
  } catch (...) {
    by_address_.erase(it);
    throw;
  }
  free_bytes_ += bytes;
}

std::optional<uint64_t> FreeSpace::take(uint64_t bytes) noexcept {
  const auto fit = by_size_.lower_bound({bytes, 0});
  if (fit == by_size_.end()) return std::nullopt;
  const auto [size, start] = *fit;
  auto size_node = by_size_.extract(fit);
  auto address_node = by_address_.extract(start);
  if (size > bytes) {
    // The remainder keeps the nodes: re-keying an extracted node and inserting it back cannot
    // allocate, so a block is carved out without touching the heap.
    address_node.key() = start + bytes;
    address_node.mapped() = size - bytes;
    by_address_.insert(std::move(address_node));
    size_node.value() = {size - bytes, start + bytes};
    by_size_.insert(std::move(size_node));
  }
  free_bytes_ -= bytes;
  return start;
}

Range FreeSpace::give_back(uint64_t start, uint64_t bytes, uint64_t region_start,
                           uint64_t region_end) {
  Range merged{start, bytes};
  // Neighbours, each only if free and inside the same region (regions may be adjacent in the
  // address space, and each is unpinned whole).
  auto next = merged.end() < region_end ? by_address_.find(merged.end()) : by_address_.end();
  auto previous = by_address_.end();
  if (start > region_start) {
    auto after = by_address_.lower_bound(start);
    if (after != by_address_.begin()) {
      --after;
      if (after->first + after->second == start) previous = after;
    }
  }

  if (previous == by_address_.end() && next == by_address_.end()) {
    add(start, bytes);  // the only case that allocates
    return merged;
  }
  // Reuse one neighbour's nodes for the merged range (re-keying an extracted node cannot
  // allocate) and drop the other neighbour's, if both were free.
  const bool both = previous != by_address_.end() && next != by_address_.end();
  const auto kept = previous != by_address_.end() ? previous : next;
  if (next != by_address_.end()) merged.bytes += next->second;
  if (previous != by_address_.end()) {
    merged.start = previous->first;
    merged.bytes += previous->second;
  }
  auto size_node = by_size_.extract({kept->second, kept->first});
  if (both) by_size_.erase({next->second, next->first});
  auto address_node = by_address_.extract(kept);
  if (both) by_address_.erase(next);
  address_node.key() = merged.start;
  address_node.mapped() = merged.bytes;
  by_address_.insert(std::move(address_node));
  size_node.value() = {merged.bytes, merged.start};
  by_size_.insert(std::move(size_node));
  free_bytes_ += bytes;
  return merged;
}

bool FreeSpace::remove(uint64_t start, uint64_t bytes) noexcept {
  const auto it = by_address_.find(start);
  if (it == by_address_.end() || it->second != bytes) return false;
  by_address_.erase(it);
  by_size_.erase({bytes, start});
  free_bytes_ -= bytes;
  return true;
}

void FreeSpace::remove_within(uint64_t start, uint64_t end) noexcept {
  for (auto it = by_address_.lower_bound(start); it != by_address_.end() && it->first < end;) {
    by_size_.erase({it->second, it->first});
    free_bytes_ -= it->second;
    it = by_address_.erase(it);
  }
}

}  // namespace vramspill::tiers
