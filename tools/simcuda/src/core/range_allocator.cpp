#include "core/range_allocator.h"

#include <iterator>

namespace simcuda {

RangeAllocator::RangeAllocator(uint64_t begin, uint64_t size) { free_.emplace(begin, size); }

bool RangeAllocator::take(uint64_t begin, uint64_t size) {
  auto it = free_.upper_bound(begin);
  if (it == free_.begin()) return false;
  --it;
  const uint64_t free_begin = it->first;
  const uint64_t free_end = it->first + it->second;
  if (begin + size > free_end) return false;
  free_.erase(it);
  if (begin > free_begin) free_.emplace(free_begin, begin - free_begin);
  if (begin + size < free_end) free_.emplace(begin + size, free_end - (begin + size));
  return true;
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t size, uint64_t alignment, uint64_t hint) {
  if (size == 0) return std::nullopt;
  if (hint != 0 && hint % alignment == 0 && take(hint, size)) return hint;
  for (const auto& [begin, length] : free_) {
    const uint64_t aligned = (begin + alignment - 1) & ~(alignment - 1);
    if (aligned - begin + size <= length) {
      take(aligned, size);
      return aligned;
    }
  }
  return std::nullopt;
}

void RangeAllocator::release(uint64_t begin, uint64_t size) {
  uint64_t end = begin + size;
  auto next = free_.lower_bound(begin);
  if (next != free_.end() && next->first == end) {
    end += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == begin) {
      previous->second = end - previous->first;
      return;
    }
  }
  free_.emplace(begin, end - begin);
}

}  // namespace simcuda
