#include "core/pool_chunk.h"

#include <iterator>

namespace simcuda {
namespace {

// Two free neighbours become one range when every stream may use both alike: neither has a
// pending free, or both were freed on the same stream (whose later free covers the earlier one
// in its order).
bool mergeable(const PoolRange& a, const PoolRange& b) {
  if (a.live || b.live) return false;
  if (!a.pending || !b.pending) return !a.pending && !b.pending;
  return a.pending->stream == b.pending->stream;
}

std::optional<PendingFree> later(const std::optional<PendingFree>& a,
                                 const std::optional<PendingFree>& b) {
  if (!a || !b) return std::nullopt;
  return a->sequence >= b->sequence ? a : b;
}

}  // namespace

PoolChunk::PoolChunk(const Allocation& memory) : memory_(memory) {
  ranges_[memory.base] = PoolRange{.bytes = memory.mapped, .live = false, .pending = {}};
}

void PoolChunk::take(uint64_t address, uint64_t bytes) {
  PoolRange& range = ranges_.at(address);
  if (range.bytes > bytes)
    ranges_[address + bytes] = PoolRange{.bytes = range.bytes - bytes, .pending = range.pending};
  range = PoolRange{.bytes = bytes, .live = true, .pending = {}};
}

uint64_t PoolChunk::give_back(uint64_t address, std::optional<PendingFree> pending) {
  auto it = ranges_.find(address);
  if (it == ranges_.end() || !it->second.live) return 0;
  const uint64_t bytes = it->second.bytes;
  it->second = PoolRange{.bytes = bytes, .pending = std::move(pending)};
  merge_around(it);
  return bytes;
}

void PoolChunk::settle(const std::function<bool(const PendingFree&)>& settled) {
  for (auto& [address, range] : ranges_)
    if (range.pending && settled(*range.pending)) range.pending.reset();
  for (auto it = ranges_.begin(); it != ranges_.end(); ++it)
    while (absorb_next(it)) {
    }
}

bool PoolChunk::idle() const {
  const PoolRange& only = ranges_.begin()->second;
  return ranges_.size() == 1 && !only.live && !only.pending;
}

// Merges the range after `it` into it when both are free and mergeable.
bool PoolChunk::absorb_next(std::map<uint64_t, PoolRange>::iterator it) {
  const auto next = std::next(it);
  if (next == ranges_.end() || !mergeable(it->second, next->second)) return false;
  it->second.pending = later(it->second.pending, next->second.pending);
  it->second.bytes += next->second.bytes;
  ranges_.erase(next);
  return true;
}

void PoolChunk::merge_around(std::map<uint64_t, PoolRange>::iterator it) {
  absorb_next(it);
  if (it != ranges_.begin()) absorb_next(std::prev(it));
}

}  // namespace simcuda
