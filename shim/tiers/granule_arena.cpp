#include "tiers/granule_arena.h"

#include <algorithm>
#include <iterator>
#include <new>
#include <set>
#include <string>
#include <utility>

namespace vramspill::tiers {

GranuleArena::~GranuleArena() {
  // Note [Moves copied on the stream]: nothing a copy still reads or writes is given back.
  if (mover_.copies_pending() == 0 || ops_.wait_for_copies() == CUDA_SUCCESS) {
    retire_copies(true, true);
  } else {
    return;  // the driver keeps everything
  }
  for (auto& [base, block] : blocks_) {
    if (!block.staged.empty()) unstage(base);
  }
  for (auto& [base, block] : blocks_) {
    if (unmap_first(base, block.granules, block.granules.size()))
      unreserve(base, granules_for(block.bytes));
    for (const Granule& granule : block.granules) release(granule);
  }
  for (const Granule& granule : pooled_device_) release(granule);
  for (const Granule& granule : pooled_host_) release(granule);
}

CUresult GranuleArena::allocate(uint64_t bytes, uint64_t device_granules,
                                CUdeviceptr* base) noexcept {
  const uint64_t count = granules_for(bytes);
  if (base == nullptr || bytes == 0 || device_granules > count) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Granule> granules;
  try {
    granules.reserve(count);
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Note [Moves copied on the stream]: the program writes a new block as it likes. (No move runs
  // between the settling and the taking: the placement serialises a device's allocations and
  // moves.)
  if (const CUresult settled = settle_copies(); settled != CUDA_SUCCESS) return settled;
  CUresult result = take_granules(count, device_granules, granules);
  CUdeviceptr range = 0;
  if (result == CUDA_SUCCESS) result = ops_.reserve(count * kGranuleBytes, &range);
  if (result != CUDA_SUCCESS) {
    pool(granules);
    return result;
  }
  std::vector<GranuleHandle> handles;
  try {
    handles.reserve(count);
    for (const Granule& granule : granules) handles.push_back(granule.handle);
  } catch (const std::bad_alloc&) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  // All or nothing: a failed map leaves nothing mapped.
  if (result == CUDA_SUCCESS) result = ops_.map(range, handles);
  const std::size_t mapped = result == CUDA_SUCCESS ? count : 0;
  if (result == CUDA_SUCCESS) {
    try {
      const std::lock_guard lock(mutex_);
      blocks_.emplace(range,
                      Block{.bytes = bytes, .granules = granules, .staged = {}, .staged_since = 0});
      *base = range;
      return CUDA_SUCCESS;
    } catch (const std::bad_alloc&) {  // the books cannot hold it: undone like a failed map
      result = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (unmap_first(range, granules, mapped)) {
    unreserve(range, count);
  } else {
    const std::lock_guard lock(mutex_);
    ++leaked_ranges_;  // granules the driver would not unmap keep it
  }
  pool(granules);
  return result;
}

CUresult GranuleArena::take_granules(uint64_t count, uint64_t device_count,
                                     std::vector<Granule>& taken, bool moving) {
  uint64_t wanted[2] = {device_count, count - device_count};
  {
    const std::lock_guard lock(mutex_);
    if (moving) {  // Note [What the pools keep]
      taken_since_trim_[0] += wanted[0];
      taken_since_trim_[1] += wanted[1];
    }
    for (const GranuleKind kind : {GranuleKind::kDevice, GranuleKind::kHost}) {
      std::vector<Granule>& pooled = pool_of(kind);
      uint64_t& still_wanted = wanted[static_cast<int>(kind)];
      for (; still_wanted > 0 && !pooled.empty(); --still_wanted) {
        taken.push_back(pooled.back());
        pooled.pop_back();
      }
      uint64_t& unsettled = unsettled_[static_cast<int>(kind)];
      unsettled = std::min<uint64_t>(unsettled, pooled.size());
    }
  }
  CUresult result = CUDA_SUCCESS;
  for (const GranuleKind kind : {GranuleKind::kDevice, GranuleKind::kHost}) {
    for (uint64_t& still_wanted = wanted[static_cast<int>(kind)];
         still_wanted > 0 && result == CUDA_SUCCESS; --still_wanted) {
      GranuleHandle handle = 0;
      if (result = ops_.create(kind, &handle); result != CUDA_SUCCESS) break;
      taken.push_back({.handle = handle, .kind = kind});
      const std::lock_guard lock(mutex_);
      ++created_;
    }
  }
  // Device granules first, also when the driver gave less than asked: the block's first
  // `device_count` granules are on the device, and a move hands device granules out from the
  // front. Within a kind, by home, those without one last: a move copies once into homes that
  // follow each other (Note [Granule homes]).
  std::ranges::sort(taken, [](const Granule& a, const Granule& b) {
    const auto order = [](const Granule& granule) {
      return std::pair(granule.kind != GranuleKind::kDevice, granule.home - 1);  // 0 wraps last
    };
    return order(a) < order(b);
  });
  return result;
}

bool GranuleArena::unmap_first(CUdeviceptr base, std::vector<Granule>& granules,
                               std::size_t count) {
  if (count == 0 || ops_.unmap(base, count) == CUDA_SUCCESS) return true;
  std::vector<bool> kept(count, false);
  bool all_unmapped = true;
  for (std::size_t i = 0; i < count; ++i) {
    kept[i] = ops_.unmap(base + i * kGranuleBytes, 1) != CUDA_SUCCESS;
    all_unmapped = all_unmapped && !kept[i];
  }
  if (all_unmapped) return true;
  std::size_t index = 0;
  uint64_t leaked = 0;
  std::erase_if(granules, [&](const Granule&) {
    const bool lost = index < count && kept[index];
    ++index;
    leaked += lost ? 1 : 0;
    return lost;
  });
  const std::lock_guard lock(mutex_);
  leaked_granules_ += leaked;
  return false;
}

void GranuleArena::unreserve(CUdeviceptr base, uint64_t granules) {
  if (ops_.unreserve(base, granules * kGranuleBytes) == CUDA_SUCCESS) return;
  const std::lock_guard lock(mutex_);
  ++leaked_ranges_;
}

void GranuleArena::pool(const std::vector<Granule>& granules) noexcept {
  for (const Granule& granule : granules) pool_one(granule);
}

void GranuleArena::pool_one(const Granule& granule) noexcept {
  try {
    const std::lock_guard lock(mutex_);
    pool_of(granule.kind).push_back(granule);
    // Note [Moves copied on the stream]: a copy in flight may still use it, as far as is known.
    if (mover_.copies_pending() != 0) ++unsettled_[static_cast<int>(granule.kind)];
    return;
  } catch (const std::bad_alloc&) {  // the pool cannot grow: the driver has it back instead
  }
  // Not under a copy in flight that may still use it (Note [Moves copied on the stream]): the
  // copies are waited for first, and should that fail it stays the driver's, unused.
  if (mover_.copies_pending() != 0 && ops_.wait_for_copies() != CUDA_SUCCESS) {
    const std::lock_guard lock(mutex_);
    ++leaked_granules_;
    return;
  }
  release(granule);
}

void GranuleArena::release(const Granule& granule) noexcept {
  // A granule still mapped at its home would outlive its release: it stays the driver's.
  const bool released = mover_.vacate(granule) && ops_.release(granule.handle) == CUDA_SUCCESS;
  const std::lock_guard lock(mutex_);
  (released ? released_ : leaked_granules_) += 1;
}

std::optional<ArenaBlock> GranuleArena::free(CUdeviceptr base) noexcept {
  const std::lock_guard move_lock(move_mutex_);  // Note [Moving a granule]
  Block block;
  bool staged = false;
  {
    const std::lock_guard lock(mutex_);
    const auto found = blocks_.find(base);
    if (found == blocks_.end()) return std::nullopt;
    staged = !found->second.staged.empty();
  }
  const bool copied_into = mover_.copying_into(base);
  if (staged) unstage(base);  // Note [Staged promotions]
  // Note [Moves copied on the stream]: a copy may still write the block's granules.
  const bool copy_over = !copied_into || ops_.wait_for_copies() == CUDA_SUCCESS;
  if (copied_into && copy_over) retire_copies(true, false);
  {
    const std::lock_guard lock(mutex_);
    const auto found = blocks_.find(base);
    block = std::move(found->second);
    blocks_.erase(found);
    // Note [What the pools keep]: the moves to come have this block's granules less to move.
    for (std::size_t kind = 0; kind < demand_.size(); ++kind) {
      const uint64_t freed = block.granules.size();
      demand_[kind] -= std::min(demand_[kind], freed);
      taken_since_trim_[kind] -= std::min(taken_since_trim_[kind], freed);
    }
  }
  const ArenaBlock freed = view(base, block);
  if (!copy_over) {  // mapped under a copy that may never end: left to the driver
    const std::lock_guard lock(mutex_);
    ++leaked_ranges_;
    leaked_granules_ += block.granules.size();
    return freed;
  }
  if (unmap_first(base, block.granules, block.granules.size())) {
    unreserve(base, freed.granules);
  } else {
    const std::lock_guard lock(mutex_);
    ++leaked_ranges_;
  }
  pool(block.granules);
  return freed;
}

std::optional<ArenaBlock> GranuleArena::block_containing(CUdeviceptr address) const noexcept {
  const std::lock_guard lock(mutex_);
  auto after = blocks_.upper_bound(address);
  if (after == blocks_.begin()) return std::nullopt;
  const auto& [base, block] = *std::prev(after);
  if (address - base >= block.granules.size() * kGranuleBytes) return std::nullopt;
  return view(base, block);
}

void GranuleArena::trim() noexcept {
  std::array<uint64_t, 2> keep{options_.keep_device_granules, options_.keep_host_granules};
  {
    const std::lock_guard lock(mutex_);
    for (std::size_t kind = 0; kind < keep.size(); ++kind) {  // Note [What the pools keep]
      demand_[kind] = std::max(taken_since_trim_[kind], demand_[kind] - (demand_[kind] + 7) / 8);
      taken_since_trim_[kind] = 0;
      keep[kind] = std::max(keep[kind], demand_[kind]);
    }
  }
  trim_to(keep[0], keep[1], false);
}

void GranuleArena::give_back_device_granules(uint64_t granules) noexcept {
  uint64_t pooled = 0;
  {
    const std::lock_guard lock(mutex_);
    pooled = pooled_device_.size();
  }
  trim_to(pooled > granules ? pooled - granules : 0, UINT64_MAX, true);
}

void GranuleArena::trim_to(uint64_t keep_device, uint64_t keep_host, bool settle) noexcept {
  // Note [Moves copied on the stream]: no memory a copy may still use goes back to the driver.
  if (settle) {
    // Only when what is to go reaches into the granules a copy may use (the last unsettled_).
    bool short_of_settled = false;
    {
      const std::lock_guard lock(mutex_);
      short_of_settled = (pooled_device_.size() > keep_device && unsettled_[0] > keep_device) ||
                         (pooled_host_.size() > keep_host && unsettled_[1] > keep_host);
    }
    if (short_of_settled && settle_copies() != CUDA_SUCCESS) return;
  }
  std::vector<Granule> surplus;
  {
    const std::lock_guard lock(mutex_);
    for (const GranuleKind kind : {GranuleKind::kDevice, GranuleKind::kHost}) {
      std::vector<Granule>& pooled = pool_of(kind);
      const uint64_t keep = kind == GranuleKind::kDevice ? keep_device : keep_host;
      // The settled granules are the first ones: a copy in flight may use the last unsettled_.
      const uint64_t settled = pooled.size() - unsettled_[static_cast<int>(kind)];
      const uint64_t count = std::min(pooled.size() > keep ? pooled.size() - keep : 0, settled);
      const auto first = pooled.begin() + static_cast<std::ptrdiff_t>(settled - count);
      const auto past = pooled.begin() + static_cast<std::ptrdiff_t>(settled);
      try {
        surplus.insert(surplus.end(), first, past);
      } catch (const std::bad_alloc&) {
        continue;  // trimmed next time
      }
      pooled.erase(first, past);
    }
  }
  for (const Granule& granule : surplus) release(granule);
}

ArenaBlock GranuleArena::view(CUdeviceptr base, const Block& block) {
  ArenaBlock view{.base = base,
                  .bytes = block.bytes,
                  .granules = block.granules.size(),
                  .staged_granules = block.staged.size()};
  for (const Granule& granule : block.granules)
    view.device_granules += granule.kind == GranuleKind::kDevice ? 1 : 0;
  return view;
}

ArenaStats GranuleArena::stats() const noexcept {
  const std::lock_guard lock(mutex_);
  ArenaStats stats{.blocks = blocks_.size(),
                   .pooled_device_granules = pooled_device_.size(),
                   .pooled_host_granules = pooled_host_.size(),
                   .homes = mover_.homes(),
                   .created_granules = created_,
                   .released_granules = released_,
                   .leaked_granules = leaked_granules_,
                   .leaked_ranges = leaked_ranges_,
                   .unbacked_granules = mover_.unbacked_granules(),
                   .move_vmm_calls = mover_.move_vmm_calls(),
                   .vmm_calls = ops_.vmm_calls()};
  for (const auto& [base, block] : blocks_) {
    const ArenaBlock counted = view(base, block);
    stats.device_granules += counted.device_granules;
    stats.host_granules += counted.host_granules();
    stats.staged_host_granules += counted.staged_granules;
  }
  return stats;
}

bool GranuleArena::check_invariants(std::string* problem) const {
  const auto fail = [&](std::string what) {
    if (problem != nullptr) *problem = std::move(what);
    return false;
  };
  const std::lock_guard lock(mutex_);
  std::set<GranuleHandle> seen;
  std::set<CUdeviceptr> homes;
  const auto home_taken = [&](const Granule& granule) {
    return granule.home != 0 && !homes.insert(granule.home).second;
  };
  uint64_t held = 0;
  CUdeviceptr previous_end = 0;
  for (const auto& [base, block] : blocks_) {
    if (base % kGranuleBytes != 0) return fail("a block's range is not granule-aligned");
    if (base < previous_end) return fail("two blocks' ranges overlap");
    if (block.granules.size() != granules_for(block.bytes))
      return fail("a block has " + std::to_string(block.granules.size()) + " granules for " +
                  std::to_string(block.bytes) + " bytes");
    previous_end = base + block.granules.size() * kGranuleBytes;
    for (const Granule& granule : block.granules) {
      if (!seen.insert(granule.handle).second) return fail("a granule backs two places");
      if (home_taken(granule)) return fail("two granules share a home");
      ++held;
    }
    for (const Slot& slot : block.staged) {
      if (block.granules.at(slot.index).handle != slot.to.handle)
        return fail("a staged granule is not in its block's books");
      if (!seen.insert(slot.from.handle).second)
        return fail("a staged block's old granule is reused");
      if (home_taken(slot.from)) return fail("two granules share a home");
      ++held;
    }
  }
  for (const auto* pooled : {&pooled_device_, &pooled_host_}) {
    for (const Granule& granule : *pooled) {
      if (!seen.insert(granule.handle).second) return fail("a pooled granule is also in use");
      if (home_taken(granule)) return fail("two granules share a home");
      if (granule.kind != (pooled == &pooled_device_ ? GranuleKind::kDevice : GranuleKind::kHost))
        return fail("a granule is pooled with the other kind");
      ++held;
    }
  }
  if (created_ != released_ + leaked_granules_ + held)
    return fail("created granules (" + std::to_string(created_) +
                ") are not released + leaked + held (" + std::to_string(released_) + " + " +
                std::to_string(leaked_granules_) + " + " + std::to_string(held) + ")");
  // A leaked granule may keep its home mapped (the driver refused to vacate it): only then may
  // the mover map more homes than the books know.
  const uint64_t mapped_homes = mover_.homes();
  if (homes.size() > mapped_homes || (leaked_granules_ == 0 && homes.size() != mapped_homes))
    return fail("the books know " + std::to_string(homes.size()) + " homes, the mover maps " +
                std::to_string(mapped_homes));
  return true;
}

}  // namespace vramspill::tiers
