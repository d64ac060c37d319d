// A stand-in for cuMemHostAlloc / cuMemFreeHost: real, readable anonymous memory from mmap, with
// every call counted, the pinning thread recorded, and failure and slowness on demand.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "tiers/pinned_memory_ops.h"

namespace vramspill::tiers {

class FakePinnedMemory {
 public:
  FakePinnedMemory() = default;
  FakePinnedMemory(const FakePinnedMemory&) = delete;
  FakePinnedMemory& operator=(const FakePinnedMemory&) = delete;
  ~FakePinnedMemory() {
    for (const auto& [base, bytes] : outstanding_) munmap(base, bytes);
  }

  PinnedMemoryOps ops() { return {this, &FakePinnedMemory::pin, &FakePinnedMemory::unpin}; }

  std::atomic<bool> fail{false};
  std::chrono::milliseconds delay{0};

  int pins() const { return pins_.load(); }
  int unpins() const { return unpins_.load(); }
  std::vector<std::size_t> pin_sizes() const {
    std::lock_guard lock(mutex_);
    return pin_sizes_;
  }
  // Unpins made by `thread`.
  int unpins_by(std::thread::id thread) const {
    std::lock_guard lock(mutex_);
    int count = 0;
    for (const std::thread::id unpinner : unpinners_) count += unpinner == thread ? 1 : 0;
    return count;
  }
  // Pins made by `thread`.
  int pins_by(std::thread::id thread) const {
    std::lock_guard lock(mutex_);
    int count = 0;
    for (const std::thread::id pinner : pinners_) count += pinner == thread ? 1 : 0;
    return count;
  }
  std::size_t outstanding_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t total = 0;
    for (const auto& [base, bytes] : outstanding_) total += bytes;
    return total;
  }
  std::size_t outstanding_regions() const {
    std::lock_guard lock(mutex_);
    return outstanding_.size();
  }

 private:
  static bool pin(void* context, std::size_t bytes, void** base) {
    auto* self = static_cast<FakePinnedMemory*>(context);
    if (self->delay.count() > 0) std::this_thread::sleep_for(self->delay);
    if (self->fail) return false;
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return false;
    std::lock_guard lock(self->mutex_);
    ++self->pins_;
    self->pin_sizes_.push_back(bytes);
    self->pinners_.push_back(std::this_thread::get_id());
    self->outstanding_[memory] = bytes;
    *base = memory;
    return true;
  }

  static bool unpin(void* context, void* base, std::size_t bytes) {
    auto* self = static_cast<FakePinnedMemory*>(context);
    std::lock_guard lock(self->mutex_);
    const auto it = self->outstanding_.find(base);
    if (it == self->outstanding_.end() || it->second != bytes) {
      ++self->bad_unpins_;
      return false;
    }
    self->outstanding_.erase(it);
    munmap(base, bytes);
    ++self->unpins_;
    self->unpinners_.push_back(std::this_thread::get_id());
    return true;
  }

 public:
  int bad_unpins() const { return bad_unpins_.load(); }

 private:
  mutable std::mutex mutex_;
  std::atomic<int> pins_{0};
  std::atomic<int> unpins_{0};
  std::vector<std::thread::id> unpinners_;  // guarded by mutex_
  std::atomic<int> bad_unpins_{0};
  std::vector<std::size_t> pin_sizes_;
  std::vector<std::thread::id> pinners_;
  std::map<void*, std::size_t> outstanding_;
};

}  // namespace vramspill::tiers
