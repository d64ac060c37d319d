#include "tiers/driver_prefetch_ops.h"

#include <atomic>
#include <mutex>

#include "driver/context_scope.h"
#include "driver/real_driver.h"
#include "telemetry/log.h"
#include "tiers/managed_advice.h"

namespace vramspill::tiers {
namespace {

// Whether work queued on `stream` now would be captured into a graph, or would break a capture
// (Note [A capture begun while a move is queued]): an answer the driver refuses counts as yes.
bool capturing(uint64_t stream) noexcept {
  const auto is_capturing = VRAMSPILL_REAL(cuStreamIsCapturing);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (is_capturing == nullptr) return false;  // a driver before captures
  if (is_capturing(reinterpret_cast<CUstream>(stream), &status) != CUDA_SUCCESS) return true;
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return false;
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
      if (const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2))
        destroy_event(prefetched_);
      if (const auto destroy_stream = VRAMSPILL_REAL(cuStreamDestroy_v2)) destroy_stream(stream_);
    }
  }
  if (const auto release = VRAMSPILL_REAL(cuDevicePrimaryCtxRelease_v2)) release(device_);
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
  const auto free_memory = VRAMSPILL_REAL(cuMemFree_v2);
  return free_memory != nullptr ? free_memory(base) : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult DriverPrefetchOps::make_stream() noexcept {
  const auto retain = VRAMSPILL_REAL(cuDevicePrimaryCtxRetain);
  const auto release_primary = VRAMSPILL_REAL(cuDevicePrimaryCtxRelease_v2);
  const auto create_stream = VRAMSPILL_REAL(cuStreamCreate);
  const auto create_event = VRAMSPILL_REAL(cuEventCreate);
  const auto destroy_stream = VRAMSPILL_REAL(cuStreamDestroy_v2);
  if (retain == nullptr || release_primary == nullptr || create_stream == nullptr ||
      create_event == nullptr || destroy_stream == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext primary = nullptr;
  if (const CUresult result = retain(&primary, device_); result != CUDA_SUCCESS) return result;
  CUresult result = CUDA_SUCCESS;
  {
    const driver::ContextScope scope(primary);
    result = scope.entered() ? create_stream(&stream_, CU_STREAM_NON_BLOCKING) : scope.status();
    if (result == CUDA_SUCCESS) {
      result = create_event(&prefetched_, CU_EVENT_DISABLE_TIMING);
      if (result != CUDA_SUCCESS) destroy_stream(stream_);
    }
  }
  if (result != CUDA_SUCCESS) {
    stream_ = nullptr;
    release_primary(device_);
    return result;
  }
  primary_ = primary;
  return CUDA_SUCCESS;
}

CUresult DriverPrefetchOps::queue_after(uint64_t stream) noexcept {
  const auto create_event = VRAMSPILL_REAL(cuEventCreate);
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2);
  if (create_event == nullptr || record == nullptr || wait_event == nullptr ||
      destroy_event == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  const std::shared_lock gate(capture_gate_);
  if (capturing(stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUevent used = nullptr;
  if (const CUresult result = create_event(&used, CU_EVENT_DISABLE_TIMING); result != CUDA_SUCCESS)
    return result;
  CUresult result = record(used, reinterpret_cast<CUstream>(stream));
  if (result == CUDA_SUCCESS) result = wait_event(stream_, used, 0);
  // The wait holds what it needs: an event may be destroyed with its record still pending.
  destroy_event(used);
  return result;
}

CUresult DriverPrefetchOps::prefetch(CUdeviceptr base, uint64_t bytes, bool to_device,
                                     std::span<const uint64_t> after) noexcept {
  const auto prefetch_v2 = VRAMSPILL_REAL(cuMemPrefetchAsync_v2);
  const auto prefetch_v1 = VRAMSPILL_REAL(cuMemPrefetchAsync);
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  if ((prefetch_v2 == nullptr && prefetch_v1 == nullptr) || record == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (stream_ == nullptr) {
    if (const CUresult result = make_stream(); result != CUDA_SUCCESS) return result;
  }
  // In the caller's context: the last uses' streams are the program's.
  for (const uint64_t stream : after) (void)queue_after(stream);
  const driver::ContextScope scope(primary_);
  if (!scope.entered()) return scope.status();
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  if (prefetch_v2 != nullptr) {
    const CUmemLocation where = to_device ? CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device_}
                                          : CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0};
    result = prefetch_v2(base, bytes, where, 0, stream_);
  } else {
    result = prefetch_v1(base, bytes, to_device ? device_ : CU_DEVICE_CPU, stream_);
  }
  if (result != CUDA_SUCCESS) return result;
  return record(prefetched_, stream_);
}

CUresult DriverPrefetchOps::order_stream_after_prefetches(uint64_t stream) noexcept {
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  if (wait_event == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (prefetched_ == nullptr) return CUDA_SUCCESS;  // nothing was ever prefetched
  const std::shared_lock gate(capture_gate_);
  if (capturing(stream)) return CUDA_SUCCESS;  // Note [A capture begun while a move is queued]
  // The event is of the primary context; the stream may be of any: the wait crosses contexts.
  return wait_event(reinterpret_cast<CUstream>(stream), prefetched_, 0);
}

bool DriverPrefetchOps::prefetches_done() noexcept {
  const auto query = VRAMSPILL_REAL(cuEventQuery);
  return prefetched_ == nullptr || (query != nullptr && query(prefetched_) == CUDA_SUCCESS);
}

CUresult DriverPrefetchOps::wait_for_prefetches() noexcept {
  const auto synchronize = VRAMSPILL_REAL(cuEventSynchronize);
  if (prefetched_ == nullptr) return CUDA_SUCCESS;
  return synchronize != nullptr ? synchronize(prefetched_) : CUDA_ERROR_NOT_SUPPORTED;
}

std::optional<uint64_t> DriverPrefetchOps::device_free() noexcept {
  const auto memory_info = VRAMSPILL_REAL(cuMemGetInfo_v2);
  if (memory_info == nullptr) return std::nullopt;
  if (primary_ == nullptr && make_stream() != CUDA_SUCCESS) return std::nullopt;
  // cuMemGetInfo answers for the current context's device: the primary context is the device's.
  const driver::ContextScope scope(primary_);
  size_t free = 0;
  size_t total = 0;
  if (!scope.entered() || memory_info(&free, &total) != CUDA_SUCCESS) return std::nullopt;
  return free;
}

}  // namespace vramspill::tiers
