// One reservation of a stream-ordered pool, cut into the ranges handed out from it
// (Note [Pool chunks] in memory_pool.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "core/allocations.h"

namespace simcuda {

class Stream;

// A free range whose cuMemFreeAsync may not have run yet: `stream` may reuse it at once (stream
// order), other streams once the free ran.
struct PendingFree {
  Stream* stream = nullptr;
  uint64_t sequence = 0;  // of the free's marker on `stream`
  std::shared_ptr<std::atomic<bool>> done;

  bool ran() const { return done->load(); }
};

struct PoolRange {
  uint64_t bytes = 0;
  bool live = false;                   // handed out
  std::optional<PendingFree> pending;  // free ranges only; none: anyone may use it
};

class PoolChunk {
 public:
  // The whole of `memory` starts as one free range.
  explicit PoolChunk(const Allocation& memory);

  const Allocation& memory() const { return memory_; }
  // By address; together they cover the chunk, and no two free neighbours could merge.
  const std::map<uint64_t, PoolRange>& ranges() const { return ranges_; }

  // Hands out the first `bytes` of the free range at `address`; the rest stays free, with the
  // same pending free.
  void take(uint64_t address, uint64_t bytes);
  // Frees the live range at `address` and merges it with free neighbours where Note [Pool
  // chunks] allows. Returns its bytes, or 0 when no live range starts there.
  uint64_t give_back(uint64_t address, std::optional<PendingFree> pending);
  // Drops the pending frees `settled` says are over, then merges what became mergeable.
  void settle(const std::function<bool(const PendingFree&)>& settled);
  // One free range with no pending free: the chunk can be released.
  bool idle() const;

 private:
  bool absorb_next(std::map<uint64_t, PoolRange>::iterator it);
  // Merges the free range at `it` with its free neighbours.
  void merge_around(std::map<uint64_t, PoolRange>::iterator it);

  Allocation memory_;
  std::map<uint64_t, PoolRange> ranges_;
};

}  // namespace simcuda
