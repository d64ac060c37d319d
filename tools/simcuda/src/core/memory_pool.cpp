// Stream-ordered pools (Note [Stream-ordered pools] in memory_pool.h). One mutex guards every
// pool: allocation rates through the driver are low, and it keeps the reuse search, the
// counters and the registry updates consistent. Lock order: pools, then Device::charge's
// reclaimer (managed memory), then the allocation registry.
#include "core/memory_pool.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/context.h"
#include "core/device.h"
#include "core/device_memory.h"
#include "core/driver.h"
#include "core/stream.h"
#include "core/submit.h"

namespace simcuda {

struct MemoryPool {
  struct Block {
    Allocation chunk;  // as registered now (base, mapped = the block's VRAM)
    bool live = false;
    uint64_t requested = 0;
    Stream* freed_on = nullptr;  // compared, and waited on only while the free is pending
    uint64_t free_sequence = 0;
    std::shared_ptr<std::atomic<bool>> free_done;
  };

  Device* device = nullptr;
  CUmemPoolProps props{};
  bool is_default = false;
  bool destroyed = false;
  uint64_t release_threshold = 0;
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
  uint64_t peer_access = 0;  // devices given READWRITE access besides the pool's own
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::map<uint64_t, Block> blocks;
};

namespace {

struct DevicePools {
  MemoryPool* default_pool = nullptr;
  MemoryPool* current = nullptr;
};

struct Pools {
  std::mutex mutex;
  std::vector<std::unique_ptr<MemoryPool>> all;  // created, default and destroyed-but-in-use
  std::vector<DevicePools> by_device;
};

Pools& pools() {
  static auto* created = [] {  // never destroyed: exit-time frees may still arrive
    auto* p = new Pools();
    p->by_device.resize(static_cast<size_t>(Driver::instance()->device_count()));
    return p;
  }();
  return *created;
}

using Block = MemoryPool::Block;

bool free_done(const Block& block) {
  return !block.live && block.free_done != nullptr && block.free_done->load();
}

MemoryPool* make_pool(Pools& p, Device& device, const CUmemPoolProps& props, bool is_default) {
  auto pool = std::make_unique<MemoryPool>();
  pool->device = &device;
  pool->props = props;
  pool->is_default = is_default;
  p.all.push_back(std::move(pool));
  return p.all.back().get();
}

DevicePools& device_pools(Pools& p, Device& device) {
  DevicePools& entry = p.by_device[static_cast<size_t>(device.ordinal())];
  if (entry.default_pool == nullptr) {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device.ordinal()};
    entry.default_pool = make_pool(p, device, props, /*is_default=*/true);
    entry.current = entry.default_pool;
  }
  return entry;
}

MemoryPool* find_any(Pools& p, CUmemoryPool handle) {
  for (const auto& pool : p.all)
    if (pool_handle(pool.get()) == handle) return pool.get();
  return nullptr;
}

void release_block(MemoryPool& pool, std::map<uint64_t, Block>::iterator it) {
  const Allocation chunk = it->second.chunk;
  Driver::instance()->allocations().remove(chunk.base);
  unmap_memory(chunk, chunk.mapped);
  pool.reserved -= chunk.mapped;
  pool.blocks.erase(it);
}

void trim_locked(MemoryPool& pool, uint64_t keep_bytes) {
  for (auto it = pool.blocks.begin(); it != pool.blocks.end() && pool.reserved > keep_bytes;) {
    auto next = std::next(it);
    if (free_done(it->second)) release_block(pool, it);
    it = next;
  }
}

// Deletes destroyed pools with nothing left in them.
void collect(Pools& p) {
  std::erase_if(p.all, [](const auto& pool) { return pool->destroyed && pool->blocks.empty(); });
}

// The smallest free block of at least `bytes` (and at most twice that) that `stream` may use
// now, or, with `allow_waiting`, after waiting for the stream that freed it.
Block* find_reusable(MemoryPool& pool, uint64_t bytes, const Stream& stream, bool allow_waiting) {
  Block* best = nullptr;
  for (auto& [base, block] : pool.blocks) {
    if (block.live || block.chunk.mapped < bytes || block.chunk.mapped > 2 * bytes) continue;
    const bool usable = block.freed_on == &stream ||
                        (free_done(block) && pool.reuse_allow_opportunistic != 0) || allow_waiting;
    if (usable && (best == nullptr || block.chunk.mapped < best->chunk.mapped)) best = &block;
  }
  return best;
}

Block* new_block(MemoryPool& pool, uint64_t bytes) {
  if (pool.props.maxSize != 0 && pool.reserved + bytes > pool.props.maxSize) return nullptr;
  Allocation chunk;
  if (map_new_memory(*pool.device, {.size = bytes, .kind = MemoryKind::kDevice}, chunk) !=
      CUDA_SUCCESS)
    return nullptr;
  pool.reserved += bytes;
  pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
  Block& block = pool.blocks[chunk.base];
  block.chunk = chunk;
  return &block;
}

void hand_out(MemoryPool& pool, Block& block, uint64_t size, Context* context) {
  AllocationRegistry& registry = Driver::instance()->allocations();
  registry.remove(block.chunk.base);  // its entry from the previous use, if any
  block.chunk.size = size;
  block.chunk.context = context;
  block.chunk.pool = pool_handle(&pool);
  block.chunk.buffer_id = registry.add(block.chunk);
  block.live = true;
  block.requested = size;
  block.freed_on = nullptr;
  block.free_done.reset();
  pool.used += size;
  pool.used_high = std::max(pool.used_high, pool.used);
}

// Marks `block` free: `done` says whether the free already happened in every stream's order.
void mark_free(MemoryPool& pool, Block& block, std::shared_ptr<std::atomic<bool>> done) {
  pool.used -= block.requested;
  block.live = false;
  block.requested = 0;
  block.free_done = std::move(done);
}

// The block behind the registry entry `allocation` of a pool block, with its pool in `*pool`;
// nullptr when that block is not handed out (a double free).
Block* live_block(Pools& p, const Allocation& allocation, MemoryPool** pool) {
  *pool = find_any(p, allocation.pool);
  if (*pool == nullptr) return nullptr;
  auto it = (*pool)->blocks.find(allocation.base);
  return it != (*pool)->blocks.end() && it->second.live ? &it->second : nullptr;
}

// The reuse policy a CU_MEMPOOL_ATTR_REUSE_* attribute names (an int, 0 or 1), or nullptr for
// any other attribute.
int* reuse_policy(MemoryPool& pool, CUmemPool_attribute attribute) {
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      return &pool.reuse_follow_event_dependencies;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      return &pool.reuse_allow_opportunistic;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return &pool.reuse_allow_internal_dependencies;
    default:
      return nullptr;
  }
}

}  // namespace

MemoryPool* default_pool(Device& device) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  return device_pools(p, device).default_pool;
}

MemoryPool* current_pool(Device& device) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  return device_pools(p, device).current;
}

void set_current_pool(Device& device, MemoryPool* pool) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  device_pools(p, device).current = pool;
}

MemoryPool* pool_from_handle(CUmemoryPool handle) {
  if (handle == nullptr) return nullptr;
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  MemoryPool* pool = find_any(p, handle);
  return pool != nullptr && !pool->destroyed ? pool : nullptr;
}

CUmemoryPool pool_handle(MemoryPool* pool) { return reinterpret_cast<CUmemoryPool>(pool); }

Device& pool_device(const MemoryPool& pool) { return *pool.device; }

MemoryPool* create_pool(Device& device, const CUmemPoolProps& props) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  return make_pool(p, device, props, /*is_default=*/false);
}

CUresult destroy_pool(MemoryPool* pool) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  if (pool->is_default || pool->destroyed) return CUDA_ERROR_INVALID_VALUE;
  DevicePools& entry = device_pools(p, *pool->device);
  if (entry.current == pool) entry.current = entry.default_pool;  // as the driver does
  pool->destroyed = true;
  trim_locked(*pool, 0);
  collect(p);
  return CUDA_SUCCESS;
}

CUresult pool_allocate(MemoryPool& pool, uint64_t size, Stream& stream, CUdeviceptr* out) {
  const uint64_t bytes = round_up(size, kLargePage);
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  Block* block = find_reusable(pool, bytes, stream, /*allow_waiting=*/false);
  if (block == nullptr) block = new_block(pool, bytes);
  if (block == nullptr && pool.reuse_allow_internal_dependencies != 0) {
    block = find_reusable(pool, bytes, stream, /*allow_waiting=*/true);
    if (block != nullptr && !free_done(*block) && block->freed_on != &stream)
      submit(stream, [] { return 0.0; }, {{block->freed_on, block->free_sequence}});
  }
  if (block == nullptr) {
    // Out of VRAM: give back what every pool of the device holds idle, then try once more.
    for (const auto& other : p.all)
      if (other->device == pool.device) trim_locked(*other, 0);
    block = new_block(pool, bytes);
  }
  if (block == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  hand_out(pool, *block, size, stream.context());
  *out = block->chunk.base;
  return CUDA_SUCCESS;
}

CUresult pool_free_async(const Allocation& allocation, Stream& stream) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  MemoryPool* pool = nullptr;
  Block* block = live_block(p, allocation, &pool);
  if (block == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto done = std::make_shared<std::atomic<bool>>(false);
  mark_free(*pool, *block, done);
  block->freed_on = &stream;
  block->free_sequence = submit(stream, [done] {
    done->store(true);
    return 0.0;
  });
  return CUDA_SUCCESS;
}

CUresult pool_free_now(const Allocation& allocation) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  MemoryPool* pool = nullptr;
  Block* block = live_block(p, allocation, &pool);
  if (block == nullptr) return CUDA_ERROR_INVALID_VALUE;
  mark_free(*pool, *block, std::make_shared<std::atomic<bool>>(true));
  return CUDA_SUCCESS;
}

void pool_trim_to(MemoryPool& pool, uint64_t keep_bytes) {
  std::lock_guard lock(pools().mutex);
  trim_locked(pool, keep_bytes);
}

CUresult pool_get_attribute(MemoryPool& pool, CUmemPool_attribute attribute, void* value) {
  std::lock_guard lock(pools().mutex);
  auto put = [value](auto number) { std::memcpy(value, &number, sizeof(number)); };
  if (const int* policy = reuse_policy(pool, attribute)) {
    put(*policy);
    return CUDA_SUCCESS;
  }
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      put(cuuint64_t{pool.release_threshold});
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      put(cuuint64_t{pool.reserved});
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      put(cuuint64_t{pool.reserved_high});
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      put(cuuint64_t{pool.used});
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      put(cuuint64_t{pool.used_high});
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult pool_set_attribute(MemoryPool& pool, CUmemPool_attribute attribute, const void* value) {
  std::lock_guard lock(pools().mutex);
  if (int* policy = reuse_policy(pool, attribute)) {
    int flag = 0;
    std::memcpy(&flag, value, sizeof(flag));
    *policy = flag != 0 ? 1 : 0;
    return CUDA_SUCCESS;
  }
  cuuint64_t number = 0;
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      std::memcpy(&number, value, sizeof(number));
      pool.release_threshold = number;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      // The watermarks can only be reset (to the current value), by writing 0.
      std::memcpy(&number, value, sizeof(number));
      if (number != 0) return CUDA_ERROR_INVALID_VALUE;
      if (attribute == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
        pool.reserved_high = pool.reserved;
      else
        pool.used_high = pool.used;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;  // the current values are read-only
  }
}

CUresult pool_set_access(MemoryPool& pool, const CUmemAccessDesc& desc) {
  if (desc.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (Driver::instance()->device(desc.location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (desc.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
      desc.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(pools().mutex);
  if (desc.location.id == pool.device->ordinal())  // the owner's access cannot change
    return desc.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
  const uint64_t bit = uint64_t{1} << desc.location.id;
  pool.peer_access = desc.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? pool.peer_access | bit
                                                                      : pool.peer_access & ~bit;
  return CUDA_SUCCESS;
}

CUmemAccess_flags pool_get_access(MemoryPool& pool, int device) {
  std::lock_guard lock(pools().mutex);
  const bool granted = device == pool.device->ordinal() || ((pool.peer_access >> device) & 1) != 0;
  return granted ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
}

void pool_forget_context(const Context& context) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  AllocationRegistry& registry = Driver::instance()->allocations();
  for (const auto& pool : p.all) {
    for (auto& [base, block] : pool->blocks) {
      if (block.chunk.context == &context) {
        block.chunk.context = pool->device->primary_context();
        registry.set_context(base, block.chunk.context);  // a free block keeps its entry
      }
      if (block.freed_on != nullptr && block.freed_on->context() == &context) {
        block.freed_on = nullptr;
        if (block.free_done == nullptr) block.free_done = std::make_shared<std::atomic<bool>>();
        block.free_done->store(true);
      }
    }
  }
}

void trim_pools_at_synchronize(Device& device) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  for (const auto& pool : p.all)
    if (pool->device == &device) trim_locked(*pool, pool->destroyed ? 0 : pool->release_threshold);
  collect(p);
}

}  // namespace simcuda
