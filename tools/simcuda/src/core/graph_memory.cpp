// Graph allocations (Note [Graph memory] in graph_memory.h). One mutex guards the charges, the
// allocations launches left allocated, and the per-device counters.
#include "core/graph_memory.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/device.h"
#include "core/device_memory.h"
#include "core/driver.h"
#include "core/memory_pool.h"

namespace simcuda {
namespace {

struct Counters {
  uint64_t current = 0, high = 0;  // VRAM charged for graph allocations (used and reserved)
};

struct State {
  std::mutex mutex;
  // Allocated by a launch and not freed since: kept alive until freed, even past the graph.
  std::map<uint64_t, std::shared_ptr<GraphAllocation>> left_allocated;
  std::vector<Counters> by_device;
};

State& state() {
  static auto* created = [] {  // never destroyed: graphs may be released at exit
    auto* s = new State();
    s->by_device.resize(static_cast<size_t>(Driver::instance()->device_count()));
    return s;
  }();
  return *created;
}

Counters& counters(State& s, int device) { return s.by_device[static_cast<size_t>(device)]; }

}  // namespace

GraphAllocation::~GraphAllocation() {
  State& s = state();
  uint64_t charged_bytes = 0;
  {
    std::lock_guard lock(s.mutex);
    if (charged) {
      charged_bytes = memory.mapped;
      counters(s, memory.device).current -= charged_bytes;
    }
  }
  Driver::instance()->allocations().remove(memory.base);
  unmap_memory(memory, charged_bytes);
}

CUresult new_graph_allocation(MemoryPool& pool, uint64_t size, Context* context,
                              std::shared_ptr<GraphAllocation>* out) {
  auto allocation = std::make_shared<GraphAllocation>();
  Allocation& memory = allocation->memory;
  const MemoryRequest request{.size = size, .kind = MemoryKind::kDevice, .charge_vram = false};
  if (CUresult result = map_new_memory(pool_device(pool), request, memory); result != CUDA_SUCCESS)
    return result;
  memory.context = context;
  memory.pool = pool_handle(&pool);  // CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: the node's pool
  memory.buffer_id = Driver::instance()->allocations().add(memory);
  *out = std::move(allocation);
  return CUDA_SUCCESS;
}

CUresult charge_graph_allocations(
    const std::vector<std::shared_ptr<GraphAllocation>>& allocations) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::vector<GraphAllocation*> charged;
  for (const auto& allocation : allocations) {
    if (allocation->charged) continue;
    Allocation& memory = allocation->memory;
    Device& device = *Driver::instance()->device(memory.device);
    if (!device.charge(memory.mapped)) {
      for (GraphAllocation* undo : charged) {
        Driver::instance()->device(undo->memory.device)->uncharge(undo->memory.mapped);
        counters(s, undo->memory.device).current -= undo->memory.mapped;
        undo->charged = false;
      }
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    allocation->charged = true;
    Counters& device_counters = counters(s, memory.device);
    device_counters.current += memory.mapped;
    device_counters.high = std::max(device_counters.high, device_counters.current);
    charged.push_back(allocation.get());
  }
  return CUDA_SUCCESS;
}

CUresult launch_graph_allocations(
    const std::vector<std::shared_ptr<GraphAllocation>>& left_allocated, bool auto_free) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!auto_free)
    for (const auto& allocation : left_allocated)
      if (s.left_allocated.contains(allocation->memory.base)) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& allocation : left_allocated)
    s.left_allocated[allocation->memory.base] = allocation;
  return CUDA_SUCCESS;
}

bool free_graph_allocation(uint64_t address) {
  std::shared_ptr<GraphAllocation> freed;  // released outside the lock: its destructor takes it
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.left_allocated.find(address);
  if (it == s.left_allocated.end()) return false;
  freed = std::move(it->second);
  s.left_allocated.erase(it);
  return true;
}

CUresult graph_memory_attribute(int device, CUgraphMem_attribute attribute, cuuint64_t* value) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Counters& device_counters = counters(s, device);
  switch (attribute) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *value = device_counters.current;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      *value = device_counters.high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult reset_graph_memory_watermark(int device, CUgraphMem_attribute attribute) {
  if (attribute != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH &&
      attribute != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  Counters& device_counters = counters(s, device);
  device_counters.high = device_counters.current;  // as for pools: down to what is in use now
  return CUDA_SUCCESS;
}

}  // namespace simcuda
