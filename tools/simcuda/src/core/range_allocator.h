// First-fit allocator of [offset, offset + size) ranges inside one span. Used for simulated
// virtual addresses and for offsets in the physical-memory file. Not thread-safe: owners lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace simcuda {

class RangeAllocator {
 public:
  RangeAllocator(uint64_t begin, uint64_t size);

  // A range of `size` bytes starting at a multiple of `alignment` (a power of two), preferring
  // `hint` when that exact range is free. nullopt when nothing fits.
  std::optional<uint64_t> allocate(uint64_t size, uint64_t alignment, uint64_t hint = 0);
  // Gives back a range handed out before (or any free-able part of one).
  void release(uint64_t begin, uint64_t size);

 private:
  bool take(uint64_t begin, uint64_t size);
  std::map<uint64_t, uint64_t> free_;  // begin -> size, no two adjacent
};

}  // namespace simcuda
