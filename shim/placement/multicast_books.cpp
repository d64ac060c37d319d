#include "placement/multicast_books.h"

#include <algorithm>
#include <new>

namespace vramspill::placement {

template <typename Change>
bool MulticastBooks::update(uint64_t object, bool make, Change change) noexcept {
  const std::lock_guard lock(mutex_);
  auto found = objects_.find(object);
  if (found == objects_.end()) {
    if (!make) return true;
    try {
      found = objects_.emplace(object, Object{}).first;
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  const bool waited = waits(found->second);
  change(found->second);
  const bool waits_now = waits(found->second);
  if (waits_now && !waited) waiting_.fetch_add(1, std::memory_order_relaxed);
  if (waited && !waits_now) waiting_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

bool MulticastBooks::created(uint64_t object, uint64_t size) noexcept {
  return update(object, true, [&](Object& entry) {
    entry = Object{.size = size};  // a value handed out again starts afresh
  });
}

bool MulticastBooks::device_added(uint64_t object) noexcept {
  return update(object, true, [](Object& entry) { ++entry.devices; });
}

void MulticastBooks::bound(uint64_t object, uint64_t bytes) noexcept {
  (void)update(object, false, [&](Object& entry) {
    entry.bound += bytes;
    ++entry.binds;
  });
}

void MulticastBooks::unbound(uint64_t object, uint64_t bytes) noexcept {
  (void)update(object, false, [&](Object& entry) {
    entry.bound -= std::min(entry.bound, bytes);
    entry.binds -= std::min<uint64_t>(entry.binds, 1);
  });
}

std::optional<MulticastBooks::Object> MulticastBooks::take(uint64_t object) noexcept {
  const std::lock_guard lock(mutex_);
  const auto found = objects_.find(object);
  if (found == objects_.end()) return std::nullopt;
  const Object entry = found->second;
  if (waits(entry)) waiting_.fetch_sub(1, std::memory_order_relaxed);
  objects_.erase(found);
  return entry;
}

void MulticastBooks::put_back(uint64_t object, const Object& entry) noexcept {
  (void)update(object, true, [&](Object& current) { current = entry; });
}

}  // namespace vramspill::placement
