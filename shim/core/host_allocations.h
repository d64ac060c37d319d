// The program's own page-locked host memory (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister), by
// address, so that its free gives the bytes back to the host budget (shim/README.md, "Budgets and
// honesty": the program's pinned bytes count against the host limit, and so leave less room to
// spill). Pinning is slow and rare next to device allocations, so one mutex and a hash map.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace vramspill::core {

class HostAllocations {
 public:
  // Records `bytes` at `address`; false if it could not be recorded (out of memory). What was
  // recorded there before (memory the driver freed without a call the shim saw: a context
  // destroyed with it) goes into *replaced, or 0.
  bool add(uint64_t address, uint64_t bytes, uint64_t* replaced = nullptr) noexcept;
  // Removes and returns the bytes recorded at `address`; nullopt if none are.
  std::optional<uint64_t> remove(uint64_t address) noexcept;
  // Records again what remove() gave, for a free the driver refused; false, recording nothing,
  // when `address` holds a record again (the driver did free it, and the address was pinned
  // anew: that record is the live one) or this is out of memory.
  bool put_back(uint64_t address, uint64_t bytes) noexcept;
  // Forgets every record whose memory `freed(address)` says the driver no longer holds (a device
  // reset took it with its context) and returns their bytes.
  uint64_t forget_freed(bool (*freed)(uint64_t address)) noexcept;

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, uint64_t> bytes_;  // guarded by mutex_
};

}  // namespace vramspill::core
