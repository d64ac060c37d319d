#include "hooks/pool_tracking.h"

#include "driver/real_driver.h"
#include "hooks/driver_spill_facts.h"

namespace vramspill::hooks {
namespace {

// The pool's reserved bytes, if the driver says (Note [A pool figure the driver does not give]
// in placement/pool_books.h).
std::optional<uint64_t> pool_reserved(CUmemoryPool pool) {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  cuuint64_t value = 0;
  if (get_attribute == nullptr || pool == nullptr ||
      get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS)
    return std::nullopt;
  return value;
}

// A step of a give-back that fails is made once more: the block and the stream were good a moment
// ago, and a pool left grown past the budget is what the give-back exists to prevent.
template <typename Step>
bool twice(const Step& step) {
  return step() == CUDA_SUCCESS || step() == CUDA_SUCCESS;
}

class DriverPoolQueries final : public placement::PoolQueries {
 public:
  constexpr DriverPoolQueries() = default;

  std::optional<uint64_t> reserved(CUmemoryPool pool) noexcept override {
    return pool_reserved(pool);
  }

  CUmemoryPool default_pool(int device) noexcept override {
    const auto get_default = VRAMSPILL_REAL(cuDeviceGetDefaultMemPool);
    CUmemoryPool pool = nullptr;
    if (get_default == nullptr || get_default(&pool, device) != CUDA_SUCCESS) return nullptr;
    return pool;
  }

  int device_count() noexcept override {
    const auto count_devices = VRAMSPILL_REAL(cuDeviceGetCount);
    int count = 0;
    if (count_devices == nullptr || count_devices(&count) != CUDA_SUCCESS) return 0;
    return count;
  }
};

constinit DriverPoolQueries driver_pool_queries;
constinit placement::PoolBooks books{driver_pool_queries};

}  // namespace

CUresult current_pool(int device, CUmemoryPool& pool) {
  const auto get_pool = VRAMSPILL_REAL(cuDeviceGetMemPool);
  const auto default_pool = VRAMSPILL_REAL(cuDeviceGetDefaultMemPool);
  if (get_pool == nullptr || default_pool == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult result = get_pool(&pool, device);
  if (result == CUDA_SUCCESS || default_pool(&pool, device) == CUDA_SUCCESS) return CUDA_SUCCESS;
  return result;
}

placement::PoolBooks& pool_books() noexcept { return books; }

std::optional<placement::PoolUsage> DriverPoolDriver::usage(CUmemoryPool pool) noexcept {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  const std::optional<uint64_t> reserved = pool_reserved(pool);
  cuuint64_t used = 0;
  if (!reserved || get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
    return std::nullopt;
  return placement::PoolUsage{.reserved = *reserved, .used = used};
}

bool DriverPoolDriver::free_for_trim(CUmemoryPool /*pool*/, CUdeviceptr block,
                                     CUstream stream) noexcept {
  const auto free_async = VRAMSPILL_REAL(cuMemFreeAsync);
  if (free_async == nullptr || captures_.capturing()) return false;
  bool capturing = false;
  if (check_capture(stream, capturing) == CUDA_SUCCESS && capturing) return false;
  return twice([&] { return free_async(block, stream); });
}

bool DriverPoolDriver::wait_for_free(CUstream stream) noexcept {
  const auto synchronize = VRAMSPILL_REAL(cuStreamSynchronize);
  const auto held = captures_.hold_if_none();
  // An error that persists (a fault in earlier work) is the program's to find at its next call.
  return synchronize != nullptr && held.owns_lock() &&
         twice([&] { return synchronize(stream); });
}

void DriverPoolDriver::trim(CUmemoryPool pool) noexcept {
  // Looked at, not held: the capture gate is never taken under a pool's lock.
  const auto trim_to = VRAMSPILL_REAL(cuMemPoolTrimTo);
  if (trim_to != nullptr && !captures_.capturing()) trim_to(pool, 0);
}

}  // namespace vramspill::hooks
