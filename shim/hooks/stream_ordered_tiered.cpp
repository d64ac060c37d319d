#include "hooks/stream_ordered_tiered.h"

#include "driver/real_driver.h"
#include "driver/stream_capture.h"
#include "hooks/driver_stream_order.h"

namespace vramspill::hooks {

bool DriverStreamOrder::queue_host_function(CUstream stream, CUhostFn run, void* data) noexcept {
  const auto launch_host_func = VRAMSPILL_REAL(cuLaunchHostFunc);
  // On a stream being captured the function would join the graph, and run only if it does.
  const auto held = captures_.hold();
  return launch_host_func != nullptr &&
         !driver::stream_capturing(reinterpret_cast<uint64_t>(stream)) &&
         launch_host_func(stream, run, data) == CUDA_SUCCESS;
}

bool DriverStreamOrder::idle(CUstream stream) noexcept {
  const auto query = VRAMSPILL_REAL(cuStreamQuery);
  const auto held = captures_.hold_if_none();
  return query != nullptr && held.owns_lock() && query(stream) == CUDA_SUCCESS;
}

bool DriverStreamOrder::wait_for(CUstream stream) noexcept {
  const auto synchronize = VRAMSPILL_REAL(cuStreamSynchronize);
  const auto held = captures_.hold_if_none();
  return synchronize != nullptr && held.owns_lock() && synchronize(stream) == CUDA_SUCCESS;
}

uint64_t DriverStreamOrder::current_context() noexcept {
  const auto get_current = VRAMSPILL_REAL(cuCtxGetCurrent);
  CUcontext context = nullptr;
  if (get_current == nullptr || get_current(&context) != CUDA_SUCCESS) return 0;
  return reinterpret_cast<uint64_t>(context);
}

std::optional<CUresult> allocate_stream_ordered_tiered(ShimState& shim, int device,
                                                       CUmemoryPool pool, uint64_t bytes,
                                                       CUstream stream, CUdeviceptr* out) noexcept {
  return shim.stream_ordered_blocks.allocate(device, pool, bytes, stream, out);
}

bool keep_for_reuse(ShimState& shim, const core::Allocation& block, CUstream stream) noexcept {
  return shim.stream_ordered_blocks.keep(block, stream);
}

void pool_trimmed(ShimState& shim, CUmemoryPool pool) noexcept {
  shim.stream_ordered_blocks.pool_trimmed(pool);
}

}  // namespace vramspill::hooks
