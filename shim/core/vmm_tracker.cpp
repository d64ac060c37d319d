#include "core/vmm_tracker.h"

#include <algorithm>

namespace vramspill::core {

VmmTracker::Handle* VmmTracker::find_locked(uint64_t handle) noexcept {
  const auto it = std::ranges::find(handles_, handle, &Handle::handle);
  return it == handles_.end() ? nullptr : &*it;
}

void VmmTracker::forget_if_gone_locked(Handle* entry) noexcept {
  if (entry->references != 0 || entry->mappings != 0) return;
  *entry = handles_.back();
  handles_.pop_back();
}

void VmmTracker::created(uint64_t handle) noexcept {
  const std::lock_guard guard(mutex_);
  // A value the driver hands out again was freed: a mapping still recorded for it is one whose
  // unmap the books missed, and must not count against the new handle.
  std::erase_if(mappings_, [&](const Mapping& m) { return m.handle == handle; });
  try {
    if (Handle* entry = find_locked(handle)) {
      *entry = Handle{.handle = handle, .references = 1, .mappings = 0};  // a reused value
    } else {
      handles_.push_back(Handle{.handle = handle, .references = 1, .mappings = 0});
    }
  } catch (...) {
    // Untracked, the handle counts as freed by its first cuMemRelease: the behaviour before
    // mappings were tracked, which may under-count but never leaks budget.
  }
}

void VmmTracker::retained(uint64_t handle) noexcept {
  const std::lock_guard guard(mutex_);
  if (Handle* entry = find_locked(handle)) ++entry->references;
}

void VmmTracker::mapped(uint64_t address, uint64_t size, uint64_t handle) noexcept {
  const std::lock_guard guard(mutex_);
  Handle* entry = find_locked(handle);
  if (entry == nullptr) return;
  try {
    mappings_.push_back(Mapping{.address = address, .size = size, .handle = handle});
    ++entry->mappings;
  } catch (...) {
    // Unrecorded, this mapping cannot keep the memory counted after cuMemRelease: the budget
    // under-counts until the unmap, as it did before mappings were tracked.
  }
}

VmmTracker::Released VmmTracker::release(uint64_t handle) noexcept {
  const std::lock_guard guard(mutex_);
  Handle* entry = find_locked(handle);
  if (entry == nullptr) return {};
  // A release of a handle with no reference left (released, still mapped) is the program's
  // error, which the driver refuses: it takes nothing.
  const Released released{.freed = entry->references == 1 && entry->mappings == 0,
                          .took_reference = entry->references > 0};
  if (released.took_reference) --entry->references;
  forget_if_gone_locked(entry);
  return released;
}

void VmmTracker::undo_release(uint64_t handle, Released released) noexcept {
  if (!released.took_reference) return;
  const std::lock_guard guard(mutex_);
  if (Handle* entry = find_locked(handle)) {
    ++entry->references;
    return;
  }
  try {
    handles_.push_back(Handle{.handle = handle, .references = 1, .mappings = 0});
  } catch (...) {  // untracked: counts as freed by its next cuMemRelease, as in created()
  }
}

VmmTracker::Unmapping VmmTracker::unmap(uint64_t address, uint64_t size) noexcept {
  Unmapping unmapping;
  const std::lock_guard guard(mutex_);
  try {
    const auto inside = [&](const Mapping& m) {
      return m.address >= address && m.address - address < size;
    };
    for (const Mapping& m : mappings_)
      if (inside(m)) unmapping.removed.push_back(m);
    // Everything that can throw comes before the books change.
    unmapping.freed_handles.reserve(unmapping.removed.size());
    std::erase_if(mappings_, inside);
    for (const Mapping& m : unmapping.removed) {
      Handle* entry = find_locked(m.handle);
      if (entry == nullptr) continue;
      if (entry->mappings > 0) --entry->mappings;
      if (entry->references == 0 && entry->mappings == 0) {
        unmapping.freed_handles.push_back(entry->handle);
        forget_if_gone_locked(entry);
      }
    }
  } catch (...) {
    // Could not list what goes: leave everything recorded (the memory stays counted until the
    // process exits) rather than guess.
    return {};
  }
  return unmapping;
}

void VmmTracker::undo_unmap(const Unmapping& unmapping) noexcept {
  const std::lock_guard guard(mutex_);
  try {
    for (uint64_t handle : unmapping.freed_handles)
      handles_.push_back(Handle{.handle = handle, .references = 0, .mappings = 0});
    for (const Mapping& m : unmapping.removed) {
      mappings_.push_back(m);
      if (Handle* entry = find_locked(m.handle)) ++entry->mappings;
    }
  } catch (...) {  // the mappings stay forgotten: their memory leaves the budget at once
  }
}

std::optional<uint64_t> VmmTracker::handle_at(uint64_t address) const noexcept {
  const std::lock_guard lock(mutex_);
  for (const Mapping& mapping : mappings_) {
    if (address >= mapping.address && address - mapping.address < mapping.size)
      return mapping.handle;
  }
  return std::nullopt;
}

std::size_t VmmTracker::tracked_handles() const noexcept {
  const std::lock_guard guard(mutex_);
  return handles_.size();
}

std::size_t VmmTracker::mappings() const noexcept {
  const std::lock_guard guard(mutex_);
  return mappings_.size();
}

}  // namespace vramspill::core
