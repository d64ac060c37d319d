// The program's multicast objects, as far as whether one waits for memory (Note [Multicast binds
// device memory] in placement/vmm_spill.h): the sizes of those it created, the devices added to
// each, and the bytes bound to each. The hooks (hooks/multicast_hooks.cpp, cuMemRelease in
// hooks/vmm_hooks.cpp) tell it what the driver did; VmmSpill asks waiting().
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace vramspill::placement {

class MulticastBooks {
 public:
  struct Object {
    uint64_t size = 0;     // 0: not known (imported from another process)
    uint64_t devices = 0;  // added so far
    uint64_t bound = 0;    // bytes bound so far, over all its devices
    uint64_t binds = 0;    // binds made so far (less those unbound)
  };

  MulticastBooks() = default;
  MulticastBooks(const MulticastBooks&) = delete;
  MulticastBooks& operator=(const MulticastBooks&) = delete;

  // The driver made `object` of `size` bytes, added a device to it, bound `bytes` of memory to it
  // or unbound them. Each is false when the books had no room (the object is then not counted).
  bool created(uint64_t object, uint64_t size) noexcept;
  bool device_added(uint64_t object) noexcept;
  void bound(uint64_t object, uint64_t bytes) noexcept;
  void unbound(uint64_t object, uint64_t bytes) noexcept;

  // Before the cuMemRelease that may free `object` (the driver may hand its value out again at
  // once): its entry leaves the books, to be put back should the driver refuse.
  std::optional<Object> take(uint64_t object) noexcept;
  void put_back(uint64_t object, const Object& entry) noexcept;

  // Whether an object waits for memory: a device added to it has not yet bound the object's
  // whole size or, for one whose size is not known (imported), there are fewer binds than devices
  // added (Note [Multicast binds device memory] in placement/vmm_spill.h).
  bool waiting() const noexcept { return waiting_.load(std::memory_order_relaxed) != 0; }

 private:
  static bool waits(const Object& object) noexcept {
    if (object.devices == 0) return false;
    return object.size == 0 ? object.binds < object.devices
                            : object.bound < object.size * object.devices;
  }
  // Applies `change` to `object`'s entry (made if `make`), keeping waiting_ in step.
  template <typename Change>
  bool update(uint64_t object, bool make, Change change) noexcept;

  mutable std::mutex mutex_;
  std::map<uint64_t, Object> objects_;  // guarded by mutex_
  std::atomic<uint64_t> waiting_{0};    // objects that wait, read without the lock
};

}  // namespace vramspill::placement
