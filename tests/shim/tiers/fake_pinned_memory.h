// A stand-in for cuMemHostAlloc / cuMemFreeHost: real, readable anonymous memory from mmap, with
// every call counted, the pinning and unpinning threads recorded, failure and slowness on demand,
// and unpins held on demand (as cuMemFreeHost waits for a device whose stream is held).
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
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

  PinnedMemoryOps ops() {
    PinnedMemoryOps ops{this, &FakePinnedMemory::pin, &FakePinnedMemory::unpin};
    ops.gone = &FakePinnedMemory::gone;
    ops.forget = &FakePinnedMemory::forget;
    return ops;
  }
  // With a say in when the pool's background thread may call: while `quiet` is false it may not.
  PinnedMemoryOps ops_when_quiet() {
    PinnedMemoryOps with_quiet = ops();
    with_quiet.when_quiet = &FakePinnedMemory::when_quiet;
    return with_quiet;
  }
  std::atomic<bool> quiet{true};
  // With a limit on what may be pinned beside the host budget (as RLIMIT_MEMLOCK): `room` bytes
  // more than are pinned now.
  PinnedMemoryOps ops_with_room() {
    PinnedMemoryOps with_room = ops();
    with_room.room = [](void* self) -> uint64_t {
      auto* fake = static_cast<FakePinnedMemory*>(self);
      const uint64_t pinned = fake->outstanding_bytes();
      return pinned < fake->room ? fake->room - pinned : 0;
    };
    return with_room;
  }
  std::atomic<uint64_t> room{UINT64_MAX};

  std::atomic<bool> fail{false};
  // Pins succeed but report the memory unusable (as when the device cannot map it): false with
  // the address set, for the pool to give back.
  std::atomic<bool> unusable{false};
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
  // From now on, unpins wait until release_unpins().
  void hold_unpins() {
    std::lock_guard lock(gate_mutex_);
    holding_ = true;
  }
  void release_unpins() {
    {
      std::lock_guard lock(gate_mutex_);
      holding_ = false;
    }
    gate_changed_.notify_all();
  }
  // Whether an unpin is held within `timeout`.
  bool an_unpin_is_held_within(std::chrono::milliseconds timeout) {
    std::unique_lock lock(gate_mutex_);
    return gate_changed_.wait_for(lock, timeout, [this] { return held_ > 0; });
  }

  // A device reset: every region pinned so far is freed under the pool (and unmapped, so that a
  // pool still reading or writing one would crash the test).
  void lose_everything() {
    std::lock_guard lock(mutex_);
    for (const auto& [base, bytes] : outstanding_) {
      munmap(base, bytes);
      lost_.insert(base);
    }
    outstanding_.clear();
  }

  // The regions forget() was told of, and those of them that held blocks.
  int forgotten() const {
    std::lock_guard lock(mutex_);
    return forgotten_;
  }
  std::size_t fenced() const {
    std::lock_guard lock(mutex_);
    return fenced_.size();
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
  static bool when_quiet(void* self, void (*step)(void* pool), void* pool) {
    if (!static_cast<FakePinnedMemory*>(self)->quiet) return false;
    step(pool);
    return true;
  }
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
    return !self->unusable;
  }

  static bool gone(void* context, void* base) {
    auto* self = static_cast<FakePinnedMemory*>(context);
    std::lock_guard lock(self->mutex_);
    return self->lost_.contains(base);
  }
  static void forget(void* context, void* base, std::size_t /*bytes*/, bool held_blocks) {
    auto* self = static_cast<FakePinnedMemory*>(context);
    std::lock_guard lock(self->mutex_);
    if (held_blocks) self->fenced_.insert(base);
    ++self->forgotten_;
  }

  static bool unpin(void* context, void* base, std::size_t bytes) {
    auto* self = static_cast<FakePinnedMemory*>(context);
    {
      std::unique_lock gate(self->gate_mutex_);
      if (self->holding_) {
        ++self->held_;
        self->gate_changed_.notify_all();
        self->gate_changed_.wait(gate, [self] { return !self->holding_; });
        --self->held_;
      }
    }
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
  std::set<void*> lost_;  // freed under the pool by lose_everything()
  std::set<void*> fenced_;  // forgotten while they held blocks
  int forgotten_ = 0;
  std::mutex gate_mutex_;
  std::condition_variable gate_changed_;
  bool holding_ = false;  // guarded by gate_mutex_
  int held_ = 0;          // unpins waiting at the gate; guarded by gate_mutex_
};

}  // namespace vramspill::tiers
