// The simulated device address space.
//
// Note [Two views of device memory]
// On a GPU, a device pointer is a number the CPU cannot dereference; only kernels and copy engines
// can. simcuda keeps that property, so a program (or the shim) that touches device memory from
// the host crashes here as it would on a GPU. It reserves one span of virtual addresses, the
// *host view*, where device pointers live, and a second span of the same size right after it,
// the *shadow view*. Every mapping of physical memory is made in both: the shadow view is always
// readable and writable and is what simcuda's copy engine and kernels use (device_view());
// the host view is PROT_NONE for device memory and accessible only for managed pages resident on
// the host. Unmapped parts of a VMM reservation are PROT_NONE in both views, so a kernel that
// touches them faults, which simcuda turns into CUDA_ERROR_ILLEGAL_ADDRESS.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "core/range_allocator.h"

namespace simcuda {

class AddressSpace {
 public:
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer leaves applications at most 1.5 TiB of contiguous addresses (x86-64), too
  // few for two 1 TiB views: its builds (tests/shim/stress) simulate 128 GiB per view.
  static constexpr uint64_t kSpan = uint64_t{1} << 37;
#else
  static constexpr uint64_t kSpan = uint64_t{1} << 40;
#endif

  AddressSpace();
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  bool valid() const { return base_ != 0; }
  bool contains(uint64_t address) const { return address - base_ < kSpan; }

  // Virtual addresses only (both views stay PROT_NONE). `hint` asks for a fixed address.
  std::optional<uint64_t> reserve(uint64_t size, uint64_t alignment, uint64_t hint = 0);
  void release(uint64_t address, uint64_t size);

  // Maps `size` bytes of the physical-memory file at `file_offset` into both views.
  bool map(uint64_t address, uint64_t size, int fd, uint64_t file_offset, bool host_accessible);
  // Returns the range to the reserved, inaccessible state.
  void unmap(uint64_t address, uint64_t size);
  void set_host_access(uint64_t address, uint64_t size, bool host_accessible);

  // Where simcuda itself reads and writes the bytes of a device address.
  void* shadow(uint64_t address) const { return reinterpret_cast<void*>(address + kSpan); }
  // True for an address in the shadow view (used by the fault handler).
  bool in_shadow(uint64_t address) const { return address - (base_ + kSpan) < kSpan; }

 private:
  uint64_t base_ = 0;
  std::mutex mutex_;
  RangeAllocator addresses_;
};

}  // namespace simcuda
