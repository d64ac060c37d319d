// The driver's answers about stream-ordered pools, as a test sets them (placement/pool_books.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "placement/pool_books.h"
#include "placement/pool_exchange.h"

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

// The driver's side of stream-ordered exchanges: each pool's figures, and what stays handed out
// of a pool once a block is given back and the pool trimmed.
class FakePoolDriver final : public PoolDriver {
 public:
  std::map<CUmemoryPool, PoolUsage> pools;  // a pool missing here fails the query
  bool give_back_result = true;             // false: the block stays the program's
  std::map<CUmemoryPool, uint64_t> used_after_give_back;
  std::vector<CUdeviceptr> given_back;
  std::function<void()> while_waiting;  // runs in wait_for_free()

  std::optional<PoolUsage> usage(CUmemoryPool pool) noexcept override {
    const auto found = pools.find(pool);
    if (found == pools.end()) return std::nullopt;
    return found->second;
  }
  bool free_for_trim(CUmemoryPool, CUdeviceptr block, CUstream) noexcept override {
    given_back.push_back(block);
    return give_back_result;
  }
  bool wait_for_free(CUstream) noexcept override {
    if (while_waiting) while_waiting();
    return true;
  }
  void trim(CUmemoryPool pool) noexcept override {
    const uint64_t used = used_after_give_back[pool];
    pools[pool] = PoolUsage{.reserved = used, .used = used};  // trimmed to what is handed out
  }
};

inline CUmemPoolProps pool_props(CUmemLocationType type, int id) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = type;
  props.location.id = id;
  return props;
}

}  // namespace vramspill::placement
