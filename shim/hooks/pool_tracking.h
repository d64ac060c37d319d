// Stream-ordered pools on the real driver: their figures as cuMemPoolGetAttribute gives them, the
// device's current pool, and the process's pool books (placement/pool_books.h), which read the
// driver through this file.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "core/capture_gate.h"
#include "placement/pool_books.h"
#include "placement/pool_exchange.h"

namespace vramspill::hooks {

using placement::kHostLocatedPool;

// The device's current pool (what cuMemAllocAsync draws on), or the driver's error. A failed
// query is asked again as the default pool, which is the current one unless the program set
// another (cuDeviceSetMemPool); when both fail, the request gets the first error (Note [A failed
// device query fails the request] in hooks/devices.h).
CUresult current_pool(int device, CUmemoryPool& pool);

// The pools the process has shown the shim, whose figures are read from the real driver.
placement::PoolBooks& pool_books() noexcept;

// What a stream-ordered exchange asks of the real driver (placement/pool_exchange.h). A give-back
// makes no wait while a capture is in progress, nor lets one begin while it waits (Note [The
// capture gate]).
class DriverPoolDriver final : public placement::PoolDriver {
 public:
  explicit DriverPoolDriver(core::CaptureGate& captures) noexcept : captures_(captures) {}

  std::optional<placement::PoolUsage> usage(CUmemoryPool pool) noexcept override;
  bool free_for_trim(CUmemoryPool pool, CUdeviceptr block, CUstream stream) noexcept override;
  bool wait_for_free(CUstream stream) noexcept override;
  void trim(CUmemoryPool pool) noexcept override;

 private:
  core::CaptureGate& captures_;
};

}  // namespace vramspill::hooks
