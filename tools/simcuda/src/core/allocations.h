// Every live memory object simcuda handed out, by address: what pointer attributes, frees,
// copies and kernels need to know about a pointer.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <vector>

namespace simcuda {

struct Context;

enum class MemoryKind {
  kDevice,          // cuMemAlloc, cuMemAllocPitch, stream-ordered pool blocks
  kManaged,         // cuMemAllocManaged
  kHostPinned,      // cuMemHostAlloc, cuMemAllocHost
  kHostRegistered,  // cuMemHostRegister
  kVmmMapping,      // a cuMemMap of a cuMemCreate handle
};

struct Allocation {
  uint64_t base = 0;
  uint64_t size = 0;       // as requested (the pitch times height for pitched allocations)
  uint64_t mapped = 0;     // bytes of virtual addresses and physical memory behind it
  MemoryKind kind = MemoryKind::kDevice;
  int device = 0;          // owning device; for host memory, the device current at allocation
  bool host_located = false;  // bytes live in host RAM (pinned, registered, host VMM)
  Context* context = nullptr;
  uint64_t buffer_id = 0;  // unique per allocation, for CU_POINTER_ATTRIBUTE_BUFFER_ID
  uint64_t file_offset = 0;   // where the bytes live in PhysicalMemory (device and managed)
  unsigned int flags = 0;     // host-allocation or managed-attach flags as given
  CUmemoryPool pool = nullptr;   // the pool a stream-ordered block came from
  CUmemGenericAllocationHandle vmm_handle = 0;  // for kVmmMapping
  uint64_t vmm_offset = 0;      // offset of this mapping inside the handle
};

class AllocationRegistry {
 public:
  // Returns the new allocation's buffer id.
  uint64_t add(Allocation allocation);
  std::optional<Allocation> remove(uint64_t base);
  std::optional<Allocation> find_exact(uint64_t base) const;
  // The allocation whose [base, base + mapped) holds `address`.
  std::optional<Allocation> find_containing(uint64_t address) const;
  // An allocation that overlaps [base, base + size), if any (size > 0).
  std::optional<Allocation> find_overlapping(uint64_t base, uint64_t size) const;
  // Removes and returns every allocation whose `context` is `context`, except VMM mappings and
  // stream-ordered pool blocks, which the driver does not associate with a context: what
  // cuCtxDestroy frees (release_context_memory() in memory_release.h).
  std::vector<Allocation> remove_context(const Context* context);
  // Points the allocation starting at `base` at another context (one that outlives a destroyed
  // context); false when there is none.
  bool set_context(uint64_t base, Context* context);

 private:
  mutable std::shared_mutex mutex_;
  std::map<uint64_t, Allocation> by_base_;
  std::atomic<uint64_t> next_buffer_id_{1};
};

}  // namespace simcuda
