// Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync and their per-thread
// forms) held to the device budget through their pool's reserve (Note [Stream-ordered pools in
// the budget] in core/ledger.h).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "hooks/admission.h"
#include "hooks/pool_tracking.h"

namespace vramspill::hooks {

// One request against one pool, from reading the pool's figure to settling its growth, with the
// pool's lock held throughout (lock_pool()).
class PoolExchange {
 public:
  // Refreshes the pools' figures first if a request of `bytes` may not fit, then locks `pool`.
  PoolExchange(ShimState& shim, int device, CUmemoryPool pool, uint64_t bytes);

  // Records the pool's reserve as the driver reports it now, and returns the ledger's admission
  // for the request, counting the pool's unused reserve.
  core::Admission admit(core::Route route);

  // After a successful driver call under `admission`: true once the pool's growth is in the
  // budget. False when it does not fit: the block has been given back (freed on `stream`, which
  // is waited for, and the pool trimmed), the admission cancelled, and `admission.refusal` says
  // why; `retry` is whether trimming freed room worth a second attempt.
  bool settle(core::Admission& admission, CUdeviceptr block, CUstream stream, bool& retry);

  // Ends the exchange (the destructor does too): spills and logs happen without the lock.
  void unlock() { lock_.unlock(); }

 private:
  // The pool's reserve now, or if the driver does not say, the ledger's figure plus `assumed`
  // (Note [A pool figure the driver does not give] in hooks/pool_tracking.h).
  uint64_t reserved_now(uint64_t assumed_growth) const;

  ShimState& shim_;
  int device_;
  CUmemoryPool pool_;
  uint64_t bytes_;
  std::unique_lock<std::mutex> lock_;
  uint64_t reserved_at_admission_ = 0;
};

// The device a stream-ordered request takes memory of (Note [The device a request charges] in
// hooks/devices.h): the stream's for cuMemAllocAsync (`pool` null), the pool's otherwise, or
// kHostLocatedPool; or the error of the driver's query.
CUresult allocating_device(core::Route route, CUmemoryPool pool, CUstream stream, int& device);

// The shared flow of the stream-ordered allocation hooks: `call` is the driver's allocation into
// `*dptr`; `pool` is null for cuMemAllocAsync (the device's current pool); `stream` is the
// stream to free on and to check for capture (the per-thread stream already resolved).
template <typename Call>
CUresult pool_allocation(core::Route route, CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                         CUstream stream, Call call) {
  if (dptr == nullptr) return call();  // the driver's error, whatever the budget would say
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return call();
  int device = 0;
  if (const CUresult result = allocating_device(route, pool, stream, device);
      result != CUDA_SUCCESS)
    return result;  // Note [A failed device query fails the request] in hooks/devices.h
  if (device == kHostLocatedPool) return call();  // takes no device memory
  if (const CUresult result = know_device(*shim, device); result != CUDA_SUCCESS) return result;
  if (route == core::Route::kMemAllocAsync) {
    if (const CUresult result = current_pool(device, pool); result != CUDA_SUCCESS) return result;
  }
  const SpillTarget spill_target{
      .out = dptr, .bytes = bytesize, .stream = stream, .stream_ordered = true};
  // A second attempt only after a first one that grew the pool past the budget and then trimmed
  // it (PoolExchange::settle).
  for (int attempt = 0;; ++attempt) {
    PoolExchange exchange(*shim, device, pool, bytesize);
    core::Admission admission = exchange.admit(route);
    if (!admission.admitted) {
      exchange.unlock();
      return refuse_or_spill(*shim, admission, spill_target);
    }
    const CUresult result = call();
    if (result != CUDA_SUCCESS) {
      shim->ledger.cancel(admission);
      exchange.unlock();
      // Another process took the memory: under the budget, the request spills all the same.
      if (result == CUDA_ERROR_OUT_OF_MEMORY)
        return refuse_or_spill(*shim, driver_refusal(device, route, bytesize), spill_target);
      return result;
    }
    bool retry = false;
    if (exchange.settle(admission, *dptr, stream, retry)) {
      shim->ledger.on_allocated(admission, *dptr, bytesize);
      return CUDA_SUCCESS;
    }
    exchange.unlock();
    *dptr = 0;
    if (!retry || attempt > 0) {
      admission.admitted = false;
      return refuse_or_spill(*shim, admission, spill_target);
    }
  }
}

}  // namespace vramspill::hooks
