// Stream-ordered pools on the real driver: their figures as cuMemPoolGetAttribute gives them, the
// device's current pool, and the process's pool books (placement/pool_books.h), which read the
// driver through this file.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

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

// What a stream-ordered exchange asks of the real driver (placement/pool_exchange.h).
placement::PoolDriver& pool_driver() noexcept;

}  // namespace vramspill::hooks
