#include "hooks/pool_tracking.h"

#include "driver/real_driver.h"

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

std::optional<PoolUsage> pool_usage(CUmemoryPool pool) {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  const std::optional<uint64_t> reserved = pool_reserved(pool);
  cuuint64_t used = 0;
  if (!reserved || get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
    return std::nullopt;
  return PoolUsage{.reserved = *reserved, .used = used};
}

CUresult current_pool(int device, CUmemoryPool& pool) {
  const auto get_pool = VRAMSPILL_REAL(cuDeviceGetMemPool);
  const auto default_pool = VRAMSPILL_REAL(cuDeviceGetDefaultMemPool);
  if (get_pool == nullptr || default_pool == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult result = get_pool(&pool, device);
  if (result == CUDA_SUCCESS || default_pool(&pool, device) == CUDA_SUCCESS) return CUDA_SUCCESS;
  return result;
}

placement::PoolBooks& pool_books() noexcept { return books; }

}  // namespace vramspill::hooks
