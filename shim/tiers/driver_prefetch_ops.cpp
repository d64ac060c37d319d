#include "tiers/driver_prefetch_ops.h"

#include <atomic>
#include <initializer_list>
#include <mutex>
#include <new>

#include "driver/context_scope.h"
#include "driver/freed_memory.h"
#include "driver/real_driver.h"
#include "driver/stream_capture.h"
#include "telemetry/log.h"
#include "tiers/managed_advice.h"

namespace vramspill::tiers {
namespace {

// Whether work queued on `stream` now would be captured into a graph, or would break a capture
// (Note [A capture begun while a move is queued]); said once.
bool capturing(uint64_t stream) noexcept {
  if (!driver::stream_capturing(stream)) return false;
  static std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed))
    logging::info("tiered (prefetch): a stream was being captured into a graph as a move was "
                  "ordered with it; it was left out of that ordering, and of later ones while it "
                  "captures (managed memory stays coherent; said once)");
  return true;
}

}  // namespace

DriverPrefetchOps::~DriverPrefetchOps() {
  if (primary_ == nullptr) return;
  {
    const driver::ContextScope scope(primary_);
    if (scope.entered()) {
      if (const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2)) {
        destroy_event(promotions_.done);
        destroy_event(evictions_.done);
        for (const auto& [base, event] : evicted_) destroy_event(event);
      }
      if (const auto destroy_stream = VRAMSPILL_REAL(cuStreamDestroy_v2)) {
        destroy_stream(promotions_.stream);
        destroy_stream(evictions_.stream);
      }
    }
  }
  driver::release_primary(reference_);
}

CUresult DriverPrefetchOps::allocate(uint64_t bytes, CUdeviceptr* base) noexcept {
  const auto allocate_managed = VRAMSPILL_REAL(cuMemAllocManaged);
  if (allocate_managed == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUdeviceptr made = 0;
  if (const CUresult result = allocate_managed(&made, bytes, CU_MEM_ATTACH_GLOBAL);
      result != CUDA_SUCCESS)
    return result;
  // Without this advice the mover's evictions would be undone by the first kernel that touches
  // the block (the driver would migrate it back on the fault), behind the budget's back.
  CUresult advised =
      advise_managed(made, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device_, /*on_host=*/true);
  if (advised == CUDA_SUCCESS)
    advised =
        advise_managed(made, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, device_, /*on_host=*/false);
  if (advised != CUDA_SUCCESS) {
    (void)release(made);
    return advised;
  }
  // Note [Who may reach a managed block]: a peer the driver refuses reaches it by migration.
  for (const int peer : peers_)
    (void)advise_managed(made, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, peer, /*on_host=*/false);
  *base = made;
  return CUDA_SUCCESS;
}

CUresult DriverPrefetchOps::release(CUdeviceptr base) noexcept {
  // A block a reset took counts as freed; its eviction's event went with the context, and
  // forget_context() forgot it.
  if (const CUresult result = driver::free_device_memory(base); result != CUDA_SUCCESS)
    return result;
  if (const auto found = evicted_.find(base); found != evicted_.end()) {
    const driver::ContextScope scope(primary_);
    if (const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2);
        scope.entered() && destroy_event != nullptr)
      destroy_event(found->second);
    evicted_.erase(found);
  }
  return CUDA_SUCCESS;
}

void DriverPrefetchOps::forget_context() noexcept {
  if (primary_ == nullptr) return;
  // A reset does not release the reference the lanes took (cuda.h): it is given back here,
  // unless the shim gave it up (Note [The shim's references to primary contexts]).
  driver::release_primary(reference_);
  primary_ = nullptr;
  for (Lane* lane : {&promotions_, &evictions_}) {
    lane->stream = nullptr;
    lane->done = nullptr;
    lane->used.store(false, std::memory_order_relaxed);
    lane->end_unknown.store(false, std::memory_order_relaxed);
  }
  evicted_.clear();
  whole_lane_for_promotions_ = false;
}

CUresult DriverPrefetchOps::make_lanes() noexcept {
  const auto create_stream = VRAMSPILL_REAL(cuStreamCreate);
  const auto create_event = VRAMSPILL_REAL(cuEventCreate);
  const auto destroy_stream = VRAMSPILL_REAL(cuStreamDestroy_v2);
  const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2);
  if (create_stream == nullptr || create_event == nullptr || destroy_stream == nullptr ||
      destroy_event == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext primary = nullptr;
  driver::PrimaryReference reference;
  if (const CUresult result = driver::retain_primary(&primary, device_, reference);
      result != CUDA_SUCCESS)
    return result;
  CUresult result = CUDA_SUCCESS;
  {
    const driver::ContextScope scope(primary);
    if (!scope.entered()) result = scope.status();
    // Each lane's stream and event, or none of them.
    for (Lane* lane : {&promotions_, &evictions_}) {
      if (result == CUDA_SUCCESS) result = create_stream(&lane->stream, CU_STREAM_NON_BLOCKING);
      if (result == CUDA_SUCCESS) result = create_event(&lane->done, CU_EVENT_DISABLE_TIMING);
    }
    if (result != CUDA_SUCCESS && scope.entered()) {
      for (Lane* lane : {&promotions_, &evictions_}) {
        if (lane->done != nullptr) destroy_event(lane->done);
        if (lane->stream != nullptr) destroy_stream(lane->stream);
        lane->done = nullptr;
        lane->stream = nullptr;
      }
    }
  }
  if (result != CUDA_SUCCESS) {
    driver::release_primary(reference);
    return result;
  }
  primary_ = primary;
  reference_ = reference;
  return CUDA_SUCCESS;
}

CUresult DriverPrefetchOps::queue_after(const Lane& lane, uint64_t stream) noexcept {
  const auto create_event = VRAMSPILL_REAL(cuEventCreate);
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2);
  if (create_event == nullptr || record == nullptr || wait_event == nullptr ||
      destroy_event == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (capturing(stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUevent used = nullptr;
  if (const CUresult result = create_event(&used, CU_EVENT_DISABLE_TIMING); result != CUDA_SUCCESS)
    return result;
  CUresult result = record(used, reinterpret_cast<CUstream>(stream));
  if (result == CUDA_SUCCESS) result = wait_event(lane.stream, used, 0);
  // The wait holds what it needs: an event may be destroyed with its record still pending.
  destroy_event(used);
  return result;
}

CUresult DriverPrefetchOps::record_eviction(CUdeviceptr base) noexcept {
  const auto create_event = VRAMSPILL_REAL(cuEventCreate);
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  if (create_event == nullptr || record == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  try {
    CUevent& left = evicted_[base];
    if (left == nullptr) {
      if (const CUresult result = create_event(&left, CU_EVENT_DISABLE_TIMING);
          result != CUDA_SUCCESS) {
        evicted_.erase(base);
        return result;
      }
    }
    const CUresult recorded = record(left, evictions_.stream);
    if (recorded != CUDA_SUCCESS) {
      // It may hold an earlier eviction's end, which the block's next promotion must not take
      // for this one's.
      if (const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2)) destroy_event(left);
      evicted_.erase(base);
    }
    return recorded;
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

CUresult DriverPrefetchOps::prefetch(CUdeviceptr base, uint64_t offset, uint64_t bytes,
                                     bool to_device, std::span<const uint64_t> after,
                                     bool after_evictions) noexcept {
  const auto prefetch_v2 = VRAMSPILL_REAL(cuMemPrefetchAsync_v2);
  const auto prefetch_v1 = VRAMSPILL_REAL(cuMemPrefetchAsync);
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  if ((prefetch_v2 == nullptr && prefetch_v1 == nullptr) || record == nullptr ||
      wait_event == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (primary_ == nullptr) {
    if (const CUresult result = make_lanes(); result != CUDA_SUCCESS) return result;
  }
  Lane& lane = to_device ? promotions_ : evictions_;
  // In the caller's context: the last uses' streams are the program's.
  for (const uint64_t stream : after) (void)queue_after(lane, stream);
  const driver::ContextScope scope(primary_);
  if (!scope.entered()) return scope.status();
  // Note [Two lanes]: the orderings between the lanes.
  CUresult result = CUDA_SUCCESS;
  if (!to_device) {
    result = follow(lane, promotions_);
  } else {
    if (const auto left = evicted_.find(base); left != evicted_.end())
      result = wait_event(lane.stream, left->second, 0);
    if (result == CUDA_SUCCESS && (after_evictions || whole_lane_for_promotions_))
      result = follow(lane, evictions_);
  }
  if (result != CUDA_SUCCESS) return result;
  if (prefetch_v2 != nullptr) {
    const CUmemLocation where = to_device ? CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device_}
                                          : CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0};
    result = prefetch_v2(base + offset, bytes, where, 0, lane.stream);
  } else {
    result = prefetch_v1(base + offset, bytes, to_device ? device_ : CU_DEVICE_CPU, lane.stream);
  }
  if (result != CUDA_SUCCESS) return result;
  // The prefetch is queued: the move happens whatever follows, so it is reported done, as the
  // books must have it. An end the driver would not record is made up for by waits on the
  // whole lane: the block's next promotion waits for every eviction, and the lane's end is
  // awaited on the host before anything is taken as done.
  if (!to_device) {
    if (const CUresult recorded = record_eviction(base); recorded != CUDA_SUCCESS) {
      lost_an_end(recorded);
      whole_lane_for_promotions_ = true;
    }
  }
  if (const CUresult recorded = record(lane.done, lane.stream); recorded != CUDA_SUCCESS) {
    lost_an_end(recorded);
    (void)wait_for_lane(lane);
  } else {
    lane.end_unknown.store(false, std::memory_order_release);
  }
  lane.used.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult DriverPrefetchOps::follow(const Lane& waiting, Lane& other) noexcept {
  if (!other.used.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  if (other.end_unknown.load(std::memory_order_acquire)) return wait_for_lane(other);
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  return wait_event == nullptr ? CUDA_ERROR_NOT_SUPPORTED : wait_event(waiting.stream, other.done, 0);
}

CUresult DriverPrefetchOps::wait_for_lane(Lane& lane) noexcept {
  const auto synchronize = VRAMSPILL_REAL(cuStreamSynchronize);
  const CUresult result = synchronize == nullptr ? CUDA_ERROR_NOT_SUPPORTED : synchronize(lane.stream);
  lane.end_unknown.store(result != CUDA_SUCCESS, std::memory_order_release);
  return result;
}

void DriverPrefetchOps::lost_an_end(CUresult result) noexcept {
  static std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed))
    logging::warn("tiered (prefetch): the driver would not record the end of a prefetch (CUresult "
                  "{}); the mover waits for its whole stream instead (said once)",
                  static_cast<int>(result));
}

CUresult DriverPrefetchOps::order_stream_after_prefetches(uint64_t stream) noexcept {
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  if (wait_event == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (!promotions_.used) return CUDA_SUCCESS;  // nothing was ever promoted
  if (capturing(stream)) return CUDA_SUCCESS;  // Note [A capture begun while a move is queued]
  if (promotions_.end_unknown.load(std::memory_order_acquire)) return wait_for_lane(promotions_);
  // The event is of the primary context; the stream may be of any: the wait crosses contexts.
  return wait_event(reinterpret_cast<CUstream>(stream), promotions_.done, 0);
}

bool DriverPrefetchOps::promotions_done() noexcept {
  const auto query = VRAMSPILL_REAL(cuEventQuery);
  if (!promotions_.used) return true;
  if (promotions_.end_unknown.load(std::memory_order_acquire)) return false;
  return query != nullptr && query(promotions_.done) == CUDA_SUCCESS;
}

CUresult DriverPrefetchOps::wait_for_prefetches() noexcept {
  const auto synchronize = VRAMSPILL_REAL(cuEventSynchronize);
  for (Lane* lane : {&promotions_, &evictions_}) {
    if (!lane->used.load(std::memory_order_acquire)) continue;
    if (lane->end_unknown.load(std::memory_order_acquire)) {
      if (const CUresult result = wait_for_lane(*lane); result != CUDA_SUCCESS) return result;
      continue;
    }
    if (synchronize == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    if (const CUresult result = synchronize(lane->done); result != CUDA_SUCCESS) return result;
  }
  return CUDA_SUCCESS;
}

std::optional<uint64_t> DriverPrefetchOps::device_free() noexcept {
  const auto memory_info = VRAMSPILL_REAL(cuMemGetInfo_v2);
  if (memory_info == nullptr) return std::nullopt;
  if (primary_ == nullptr && make_lanes() != CUDA_SUCCESS) return std::nullopt;
  // cuMemGetInfo answers for the current context's device: the primary context is the device's.
  const driver::ContextScope scope(primary_);
  size_t free = 0;
  size_t total = 0;
  if (!scope.entered() || memory_info(&free, &total) != CUDA_SUCCESS) return std::nullopt;
  return free;
}

}  // namespace vramspill::tiers
