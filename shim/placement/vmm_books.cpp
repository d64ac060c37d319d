#include "placement/vmm_books.h"

#include <algorithm>

namespace vramspill::placement {

// Note [The program's host-located handles]
void VmmBooks::created_on_host(uint64_t handle, uint64_t bytes) noexcept {
  vmm_.created(handle);
  const std::lock_guard lock(on_host_mutex_);
  // A value the driver hands out again: the old handle's memory went unseen.
  const auto stale = std::ranges::find(on_host_, handle, &std::pair<uint64_t, uint64_t>::first);
  if (stale != on_host_.end()) {
    host_budget_.release(stale->second);
    on_host_.erase(stale);
  }
  try {
    on_host_.emplace_back(handle, bytes);
  } catch (...) {  // no room in the books: left uncounted rather than counted for good
    return;
  }
  host_budget_.charge(bytes);
}

std::optional<uint64_t> VmmBooks::forget_on_host(uint64_t handle) noexcept {
  const std::lock_guard lock(on_host_mutex_);
  const auto found = std::ranges::find(on_host_, handle, &std::pair<uint64_t, uint64_t>::first);
  if (found == on_host_.end()) return std::nullopt;
  const uint64_t bytes = found->second;
  on_host_.erase(found);
  return bytes;
}

void VmmBooks::settle_on_host(uint64_t handle, uint64_t bytes, CUresult result) noexcept {
  if (result == CUDA_SUCCESS) {
    host_budget_.release(bytes);
    return;
  }
  const std::lock_guard lock(on_host_mutex_);
  try {
    on_host_.emplace_back(handle, bytes);  // the handle lives on: so does its charge
  } catch (...) {  // cannot be found again: its bytes go now rather than stay counted for good
    host_budget_.release(bytes);
  }
}

void VmmBooks::settle(const core::Allocation& forgotten, CUresult result) noexcept {
  admission_.settle_free(forgotten, result);
  if (result == CUDA_SUCCESS && forgotten.route == core::Route::kSpillVmmHost)
    vmm_spill_.freed(forgotten);
}

}  // namespace vramspill::placement
