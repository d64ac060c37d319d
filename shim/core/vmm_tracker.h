// Which VMM physical allocations still hold device memory (cuMemCreate, cuMemMap, cuMemUnmap,
// cuMemRelease, cuMemRetainAllocationHandle).
//
// Note [VMM memory lives until its last mapping goes]
// cuMemRelease does not free a physical allocation that is still mapped: the driver frees it when
// the last reference is released *and* the last mapping is unmapped, in whichever order those
// come. The usual pattern (PyTorch's expandable segments, NCCL) is create, map, release at once,
// and much later unmap. So the ledger's entry for a handle must outlive cuMemRelease: otherwise
// the memory would leave the budget while the device still holds it. The tracker counts each
// handle's references (cuMemCreate gives one, cuMemRetainAllocationHandle one more, each
// cuMemRelease takes one) and its mapped ranges, and says which call actually frees the memory;
// that call's hook then settles the ledger entry (Note [Reservation protocol] in ledger.h).
// Only handles reported by created() are tracked: host-located memory the program asked for takes
// no budget, while a handle the shim made host-located (Note [Host-located VMM spills] in
// placement/vmm_spill.h) is tracked alike, since it holds host budget until the driver frees it.
//
// The hooks change the tracker *before* the driver call, so that another thread never sees a
// handle as live after the driver may have reused its value, and undo the change if the driver
// refuses. VMM calls are slow (microseconds) and rare next to launches, so one mutex suffices.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace vramspill::core {

class VmmTracker {
 public:
  struct Mapping {
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t handle = 0;
  };

  // What unmap() changed, for undo_unmap() should the driver refuse.
  struct Unmapping {
    std::vector<Mapping> removed;
    std::vector<uint64_t> freed_handles;  // released handles whose last mapping this removes
  };

  VmmTracker() = default;
  VmmTracker(const VmmTracker&) = delete;
  VmmTracker& operator=(const VmmTracker&) = delete;

  // cuMemCreate succeeded: one reference, no mappings.
  void created(uint64_t handle) noexcept;
  // cuMemRetainAllocationHandle succeeded: one reference more.
  void retained(uint64_t handle) noexcept;
  // cuMemMap succeeded.
  void mapped(uint64_t address, uint64_t size, uint64_t handle) noexcept;

  // Before cuMemRelease: takes one reference, if the handle has one left, and says whether the
  // memory is freed by it (the last reference, and nothing mapped). An untracked handle (host
  // memory, or one the tracker could not record) is taken to be freed, as cuMemRelease of an
  // unmapped handle would, and has no reference taken.
  struct Released {
    bool freed = true;
    bool took_reference = false;
  };
  Released release(uint64_t handle) noexcept;
  // The driver refused the release: the reference it took, if any, is back.
  void undo_release(uint64_t handle, Released released) noexcept;

  // Before cuMemUnmap: removes the mappings inside [address, address + size).
  Unmapping unmap(uint64_t address, uint64_t size) noexcept;
  void undo_unmap(const Unmapping& unmapping) noexcept;

  // The handle mapped at `address`, if the tracker knows one.
  std::optional<uint64_t> handle_at(uint64_t address) const noexcept;

  std::size_t tracked_handles() const noexcept;
  std::size_t mappings() const noexcept;

 private:
  struct Handle {
    uint64_t handle = 0;
    uint64_t references = 0;  // 0: released, alive only through its mappings
    uint64_t mappings = 0;
  };

  Handle* find_locked(uint64_t handle) noexcept;
  void forget_if_gone_locked(Handle* entry) noexcept;

  mutable std::mutex mutex_;
  // Both guarded by mutex_. A process has at most a few thousand of each (2 MiB granules of
  // expandable segments), so vectors: no per-entry allocation, and constant initialisation.
  std::vector<Handle> handles_;
  std::vector<Mapping> mappings_;
};

}  // namespace vramspill::core
