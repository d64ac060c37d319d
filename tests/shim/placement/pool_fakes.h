// The driver's answers about stream-ordered pools, as a test sets them (placement/pool_books.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "placement/pool_books.h"

namespace vramspill::placement {

inline CUmemoryPool fake_pool(std::uintptr_t id) { return reinterpret_cast<CUmemoryPool>(id << 4); }

class FakePoolQueries final : public PoolQueries {
 public:
  std::map<CUmemoryPool, uint64_t> reserved_bytes;  // a pool missing here fails the query
  std::map<int, CUmemoryPool> default_pools;
  int devices = 0;
  int reserved_queries = 0;

  std::optional<uint64_t> reserved(CUmemoryPool pool) noexcept override {
    ++reserved_queries;
    const auto found = reserved_bytes.find(pool);
    if (found == reserved_bytes.end()) return std::nullopt;
    return found->second;
  }
  CUmemoryPool default_pool(int device) noexcept override {
    const auto found = default_pools.find(device);
    return found == default_pools.end() ? nullptr : found->second;
  }
  int device_count() noexcept override { return devices; }
};

inline CUmemPoolProps pool_props(CUmemLocationType type, int id) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = type;
  props.location.id = id;
  return props;
}

}  // namespace vramspill::placement
