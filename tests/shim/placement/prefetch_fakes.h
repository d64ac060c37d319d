// The prefetch mover's fakes for the placement tests (Note [The prefetch mover] in
// shim/placement/prefetch_placement.h): driver calls that remember every prefetch, the devices
// that have them, and what a trace would be told.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/memory_events.h"
#include "placement/prefetch_placement.h"
#include "tiers/granule_ops.h"
#include "tiers/prefetch_ops.h"

namespace vramspill::placement {

// One prefetch the mover queued: of [base + offset, base + offset + size).
struct Prefetch {
  CUdeviceptr base = 0;
  uint64_t size = 0;
  bool to_device = false;
  std::vector<uint64_t> after;
  bool after_evictions = false;  // Note [Two lanes]
  uint64_t offset = 0;           // Note [Evicting part of a block]: an eviction of the last pages
  bool operator==(const Prefetch&) const = default;
};

// The driver as the mover sees it: blocks at made-up addresses, every call remembered.
class FakePrefetchOps final : public tiers::PrefetchOps {
 public:
  CUresult allocate(uint64_t bytes, CUdeviceptr* base) noexcept override {
    *base = next_;
    next_ += (bytes + tiers::kGranuleBytes - 1) / tiers::kGranuleBytes * tiers::kGranuleBytes +
             tiers::kGranuleBytes;
    return CUDA_SUCCESS;
  }
  CUresult release(CUdeviceptr base) noexcept override {
    if (fail_releases) return CUDA_ERROR_INVALID_VALUE;
    released.push_back(base);
    return CUDA_SUCCESS;
  }
  CUresult prefetch(CUdeviceptr base, uint64_t offset, uint64_t bytes, bool to_device,
                    std::span<const uint64_t> after, bool after_evictions) noexcept override {
    note_gate();
    if (to_device && fail_promotions) return CUDA_ERROR_INVALID_VALUE;
    if (!to_device && (fail_evictions ||
                       (evictions_before_refusal && (*evictions_before_refusal)-- <= 0)))
      return CUDA_ERROR_INVALID_VALUE;
    prefetches.push_back(
        {base, bytes, to_device, {after.begin(), after.end()}, after_evictions, offset});
    done = false;
    return CUDA_SUCCESS;
  }
  CUresult order_stream_after_prefetches(uint64_t stream) noexcept override {
    note_gate();
    ordered_streams.push_back(stream);
    return CUDA_SUCCESS;
  }
  bool promotions_done() noexcept override {
    note_gate();
    ++queries;
    return done;
  }
  CUresult wait_for_prefetches() noexcept override {
    note_gate();
    ++waits;
    if (while_waiting) std::exchange(while_waiting, nullptr)();  // once
    if (fail_waits) return CUDA_ERROR_LAUNCH_FAILED;
    done = true;
    return CUDA_SUCCESS;
  }
  std::optional<uint64_t> device_free() noexcept override { return free; }
  void forget_context() noexcept override { ++context_resets; }

  std::vector<Prefetch> prefetches;
  std::vector<uint64_t> ordered_streams;
  std::vector<CUdeviceptr> released;
  std::optional<uint64_t> free = uint64_t{1} << 40;
  bool done = true;
  bool fail_promotions = false;
  bool fail_evictions = false;
  std::optional<int> evictions_before_refusal;  // the driver refuses every eviction past these
  bool fail_releases = false;
  bool fail_waits = false;  // wait_for_prefetches() fails
  int waits = 0;
  int queries = 0;  // of promotions_done()
  int context_resets = 0;
  // Runs inside the next wait_for_prefetches(), as the mover's queued work would take time.
  std::function<void()> while_waiting;
  // Set: each query, wait, prefetch and stream order notes in gate_held whether a capture could
  // begin meanwhile (whether another thread could not take `gate` exclusively).
  std::shared_mutex* gate = nullptr;
  std::vector<bool> gate_held;

 private:
  void note_gate() {
    if (gate == nullptr) return;
    bool taken = false;
    std::thread([&] {
      taken = gate->try_lock();
      if (taken) gate->unlock();
    }).join();
    gate_held.push_back(!taken);
  }

  CUdeviceptr next_ = uint64_t{1} << 40;
};

class FakeDevices final : public PrefetchDevices {
 public:
  tiers::PrefetchOps* ops(int device) noexcept override { return device == 0 ? &ops_ : nullptr; }
  core::CaptureGate::Hold hold_if_may_move() noexcept override {
    core::CaptureGate::Hold held(gate);
    if (!moves) held.unlock();
    return held;
  }

  FakePrefetchOps& fake() { return ops_; }
  bool moves = true;  // false: as while a stream capture is in progress
  std::shared_mutex gate;  // what a capture's begin would take exclusively

 private:
  FakePrefetchOps ops_;
};

// What a trace would be told, one line an event.
class RecordedEvents final : public core::MemoryEvents {
 public:
  void device_configured(int, uint64_t, uint64_t) noexcept override {}
  void allocated(const core::Allocation& allocation) noexcept override {
    lines.push_back("alloc " + std::to_string(allocation.key));
  }
  void freed(const core::Allocation&) noexcept override {}
  void refused(int, core::Route, uint64_t) noexcept override {}
  void evicted(int, uint64_t base, uint64_t bytes) noexcept override {
    lines.push_back("evict " + std::to_string(base) + " " + std::to_string(bytes));
  }
  void promoted(int, uint64_t base, uint64_t bytes) noexcept override {
    lines.push_back("promote " + std::to_string(base) + " " + std::to_string(bytes));
  }
  void used(int, uint32_t stream, std::span<const uint64_t> bases) noexcept override {
    lines.push_back("use " + std::to_string(stream) + " " + std::to_string(bases.size()));
  }

  std::vector<std::string> lines;
};

}  // namespace vramspill::placement
