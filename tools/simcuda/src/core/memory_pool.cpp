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
#include "core/graph_memory.h"
#include "core/pool_chunk.h"
#include "core/stream.h"
#include "core/submit.h"

namespace simcuda {

struct MemoryPool {
  struct Chunk {
    PoolChunk ranges;
    // The registry entries inside the chunk (base -> end): its live ranges', and those a free
    // left behind until a new range overlaps them (Note [Pool chunks]).
    std::map<uint64_t, uint64_t> registered;
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
  std::map<uint64_t, Chunk> chunks;  // by base
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

using Chunk = MemoryPool::Chunk;

constexpr uint64_t kRangeAlignment = 512;  // Note [Pool chunks]
constexpr uint64_t kSmallestChunk = uint64_t{32} << 20;

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

// Removes the registry entries of `chunk` that overlap [address, end).
void unregister(Chunk& chunk, uint64_t address, uint64_t end) {
  auto it = chunk.registered.upper_bound(address);
  if (it != chunk.registered.begin() && std::prev(it)->second > address) --it;
  while (it != chunk.registered.end() && it->first < end) {
    Driver::instance()->allocations().remove(it->first);
    it = chunk.registered.erase(it);
  }
}

void release_chunk(MemoryPool& pool, std::map<uint64_t, Chunk>::iterator it) {
  const Allocation memory = it->second.ranges.memory();
  unregister(it->second, memory.base, memory.base + memory.mapped);
  unmap_memory(memory, memory.mapped);
  pool.reserved -= memory.mapped;
  pool.chunks.erase(it);
}

// Forgets the pending frees that are over: those that ran, when other streams may reuse their
// memory now (REUSE_ALLOW_OPPORTUNISTIC, or `host_waited`: the host saw them run, so whatever
// it queues next is ordered after them).
void settle(MemoryPool& pool, bool host_waited) {
  const bool settle_ran = host_waited || pool.reuse_allow_opportunistic != 0;
  for (auto& [base, chunk] : pool.chunks)
    chunk.ranges.settle([settle_ran](const PendingFree& free) { return settle_ran && free.ran(); });
}

// Releases idle chunks while the pool reserves more than `keep_bytes`.
void trim_locked(MemoryPool& pool, uint64_t keep_bytes, bool host_waited) {
  settle(pool, host_waited);
  for (auto it = pool.chunks.begin(); it != pool.chunks.end() && pool.reserved > keep_bytes;) {
    auto next = std::next(it);
    if (it->second.ranges.idle()) release_chunk(pool, it);
    it = next;
  }
}

// Deletes destroyed pools with nothing left in them.
void collect(Pools& p) {
  std::erase_if(p.all, [](const auto& pool) { return pool->destroyed && pool->chunks.empty(); });
}

// A free range that can hold a request.
struct Spot {
  Chunk* chunk = nullptr;
  uint64_t address = 0;
  uint64_t bytes = 0;                    // of the free range
  const PendingFree* pending = nullptr;  // its free, when it may not have run yet
};

// The smallest free range of at least `bytes` that `stream` may use now or, with
// `allow_waiting`, after waiting for the stream that freed it.
std::optional<Spot> find_spot(MemoryPool& pool, uint64_t bytes, const Stream& stream,
                              bool allow_waiting) {
  std::optional<Spot> best;
  for (auto& [base, chunk] : pool.chunks) {
    for (const auto& [address, range] : chunk.ranges.ranges()) {
      if (range.live || range.bytes < bytes || (best && range.bytes >= best->bytes)) continue;
      const PendingFree* pending = range.pending ? &*range.pending : nullptr;
      if (pending == nullptr || pending->stream == &stream || allow_waiting)
        best = Spot{&chunk, address, range.bytes, pending};
    }
  }
  return best;
}

// Reserves a chunk for a request of `bytes`: kSmallestChunk, or the request rounded up to
// kLargePage when larger; when VRAM or maxSize does not allow that much, the request rounded
// up to kLargePage alone.
std::optional<Spot> new_chunk(MemoryPool& pool, uint64_t bytes) {
  const uint64_t least = round_up(bytes, kLargePage);
  for (const uint64_t size : {std::max(least, kSmallestChunk), least}) {
    if (pool.props.maxSize != 0 && pool.reserved + size > pool.props.maxSize) continue;
    Allocation memory;
    if (map_new_memory(*pool.device, {.size = size, .kind = MemoryKind::kDevice}, memory) !=
        CUDA_SUCCESS)
      continue;
    memory.pool = pool_handle(&pool);
    pool.reserved += size;
    pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
    Chunk& chunk = pool.chunks.try_emplace(memory.base, Chunk{PoolChunk(memory), {}}).first->second;
    return Spot{&chunk, memory.base, size, nullptr};
  }
  return std::nullopt;
}

// Hands out `bytes` at `spot` for a request of `size`, registered as an allocation of its own.
void hand_out(MemoryPool& pool, const Spot& spot, uint64_t bytes, uint64_t size, Context* context) {
  Chunk& chunk = *spot.chunk;
  chunk.ranges.take(spot.address, bytes);
  unregister(chunk, spot.address, spot.address + bytes);
  const Allocation& memory = chunk.ranges.memory();
  Allocation range = memory;
  range.base = spot.address;
  range.size = size;
  range.mapped = bytes;
  range.file_offset = memory.file_offset + (spot.address - memory.base);
  range.context = context;
  Driver::instance()->allocations().add(range);
  chunk.registered[spot.address] = spot.address + bytes;
  pool.used += bytes;
  pool.used_high = std::max(pool.used_high, pool.used);
}

// The chunk of `pool` that holds `address`, if any.
Chunk* chunk_of(MemoryPool& pool, uint64_t address) {
  auto it = pool.chunks.upper_bound(address);
  if (it == pool.chunks.begin()) return nullptr;
  --it;
  const Allocation& memory = it->second.ranges.memory();
  return address - memory.base < memory.mapped ? &it->second : nullptr;
}

// Where the handed-out range behind the registry entry `allocation` lives; nullopt when it is
// not handed out (a double free).
struct Owner {
  MemoryPool* pool = nullptr;
  Chunk* chunk = nullptr;
};
std::optional<Owner> owner_of(Pools& p, const Allocation& allocation) {
  MemoryPool* pool = find_any(p, allocation.pool);
  Chunk* chunk = pool != nullptr ? chunk_of(*pool, allocation.base) : nullptr;
  if (chunk == nullptr) return std::nullopt;
  const auto& ranges = chunk->ranges.ranges();
  const auto it = ranges.find(allocation.base);
  if (it == ranges.end() || !it->second.live) return std::nullopt;
  return Owner{pool, chunk};
}

void give_back(const Owner& owner, uint64_t address, std::optional<PendingFree> pending) {
  owner.pool->used -= owner.chunk->ranges.give_back(address, std::move(pending));
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
  trim_locked(*pool, 0, /*host_waited=*/false);
  collect(p);
  return CUDA_SUCCESS;
}

CUresult pool_allocate(MemoryPool& pool, uint64_t size, Stream& stream, CUdeviceptr* out) {
  const uint64_t bytes = round_up(size, kRangeAlignment);
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  settle(pool, /*host_waited=*/false);
  std::optional<Spot> spot = find_spot(pool, bytes, stream, /*allow_waiting=*/false);
  if (!spot) spot = new_chunk(pool, bytes);
  if (!spot && pool.reuse_allow_internal_dependencies != 0) {
    spot = find_spot(pool, bytes, stream, /*allow_waiting=*/true);
    if (spot && spot->pending != nullptr && spot->pending->stream != &stream)
      submit(stream, [] { return 0.0; }, {{spot->pending->stream, spot->pending->sequence}});
  }
  if (!spot) {
    // Out of VRAM: give back what every pool of the device holds idle, then try once more.
    for (const auto& other : p.all)
      if (other->device == pool.device) trim_locked(*other, 0, /*host_waited=*/false);
    spot = new_chunk(pool, bytes);
  }
  if (!spot) return CUDA_ERROR_OUT_OF_MEMORY;
  hand_out(pool, *spot, bytes, size, stream.context());
  *out = spot->address;
  return CUDA_SUCCESS;
}

CUresult pool_free_async(const Allocation& allocation, Stream& stream) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  const std::optional<Owner> owner = owner_of(p, allocation);
  if (!owner) return CUDA_ERROR_INVALID_VALUE;
  PendingFree pending{.stream = &stream, .done = std::make_shared<std::atomic<bool>>(false)};
  pending.sequence = submit(stream, [done = pending.done] {
    done->store(true);
    return 0.0;
  });
  give_back(*owner, allocation.base, std::move(pending));
  return CUDA_SUCCESS;
}

CUresult pool_free_now(const Allocation& allocation) {
  if (free_graph_allocation(allocation.base)) return CUDA_SUCCESS;
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  const std::optional<Owner> owner = owner_of(p, allocation);
  if (!owner) return CUDA_ERROR_INVALID_VALUE;
  give_back(*owner, allocation.base, std::nullopt);
  return CUDA_SUCCESS;
}

void pool_trim_to(MemoryPool& pool, uint64_t keep_bytes) {
  std::lock_guard lock(pools().mutex);
  trim_locked(pool, keep_bytes, /*host_waited=*/false);
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
    for (auto& [chunk_base, chunk] : pool->chunks) {
      for (const auto& [base, end] : chunk.registered) {
        const std::optional<Allocation> entry = registry.find_exact(base);
        if (entry && entry->context == &context)
          registry.set_context(base, pool->device->primary_context());
      }
      // The context's streams were synchronised: their frees ran.
      chunk.ranges.settle(
          [&](const PendingFree& free) { return free.stream->context() == &context; });
    }
  }
}

void trim_pools_at_synchronize(Device& device) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  for (const auto& pool : p.all)
    if (pool->device == &device)
      trim_locked(*pool, pool->destroyed ? 0 : pool->release_threshold, /*host_waited=*/true);
  collect(p);
}

}  // namespace simcuda
