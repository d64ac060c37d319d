#include "core/allocations.h"

#include <mutex>

namespace simcuda {

uint64_t AllocationRegistry::add(Allocation allocation) {
  allocation.buffer_id = next_buffer_id_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(mutex_);
  by_base_[allocation.base] = allocation;
  return allocation.buffer_id;
}

std::optional<Allocation> AllocationRegistry::remove(uint64_t base) {
  std::unique_lock lock(mutex_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return std::nullopt;
  Allocation allocation = it->second;
  by_base_.erase(it);
  return allocation;
}

std::optional<Allocation> AllocationRegistry::find_exact(uint64_t base) const {
  std::shared_lock lock(mutex_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return std::nullopt;
  return it->second;
}

std::optional<Allocation> AllocationRegistry::find_containing(uint64_t address) const {
  std::shared_lock lock(mutex_);
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  const Allocation& candidate = it->second;
  const uint64_t extent = candidate.mapped > candidate.size ? candidate.mapped : candidate.size;
  if (address - candidate.base >= extent) return std::nullopt;
  return candidate;
}

std::optional<Allocation> AllocationRegistry::find_overlapping(uint64_t base,
                                                               uint64_t size) const {
  if (std::optional<Allocation> holding = find_containing(base)) return holding;
  std::shared_lock lock(mutex_);
  const auto next = by_base_.lower_bound(base);  // the first that starts at or after base
  if (next == by_base_.end() || next->first - base >= size) return std::nullopt;
  return next->second;
}

std::vector<Allocation> AllocationRegistry::remove_context(const Context* context) {
  std::vector<Allocation> removed;
  std::unique_lock lock(mutex_);
  for (auto it = by_base_.begin(); it != by_base_.end();) {
    const Allocation& allocation = it->second;
    if (allocation.context == context && allocation.kind != MemoryKind::kVmmMapping &&
        allocation.pool == nullptr) {
      removed.push_back(allocation);
      it = by_base_.erase(it);
    } else {
      ++it;
    }
  }
  return removed;
}

bool AllocationRegistry::set_context(uint64_t base, Context* context) {
  std::unique_lock lock(mutex_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return false;
  it->second.context = context;
  return true;
}

}  // namespace simcuda
