#include "core/address_space.h"

#include <sys/mman.h>

namespace simcuda {
namespace {

void* map_at(uint64_t address, uint64_t size, int prot, int flags, int fd, uint64_t offset) {
  return mmap(reinterpret_cast<void*>(address), size, prot, flags | MAP_FIXED, fd,
              static_cast<off_t>(offset));
}

constexpr int kReservedFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

// The lowest reservable address: 0 would make a valid allocation look like a null pointer.
constexpr uint64_t kGuard = uint64_t{2} << 20;

}  // namespace

AddressSpace::AddressSpace() : addresses_(0, 0) {
  void* base = mmap(nullptr, 2 * kSpan, PROT_NONE, kReservedFlags, -1, 0);
  if (base == MAP_FAILED) return;
  base_ = reinterpret_cast<uint64_t>(base);
  addresses_ = RangeAllocator(base_ + kGuard, kSpan - kGuard);
}

AddressSpace::~AddressSpace() {
  if (base_ != 0) munmap(reinterpret_cast<void*>(base_), 2 * kSpan);
}

std::optional<uint64_t> AddressSpace::reserve(uint64_t size, uint64_t alignment, uint64_t hint) {
  std::lock_guard lock(mutex_);
  return addresses_.allocate(size, alignment, hint);
}

void AddressSpace::release(uint64_t address, uint64_t size) {
  unmap(address, size);
  std::lock_guard lock(mutex_);
  addresses_.release(address, size);
}

bool AddressSpace::map(uint64_t address, uint64_t size, int fd, uint64_t file_offset,
                       bool host_accessible) {
  const int host_prot = host_accessible ? PROT_READ | PROT_WRITE : PROT_NONE;
  if (map_at(address + kSpan, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, file_offset) ==
      MAP_FAILED)
    return false;
  if (map_at(address, size, host_prot, MAP_SHARED, fd, file_offset) == MAP_FAILED) {
    unmap(address, size);
    return false;
  }
  return true;
}

void AddressSpace::unmap(uint64_t address, uint64_t size) {
  map_at(address, size, PROT_NONE, kReservedFlags, -1, 0);
  map_at(address + kSpan, size, PROT_NONE, kReservedFlags, -1, 0);
}

void AddressSpace::set_host_access(uint64_t address, uint64_t size, bool host_accessible) {
  mprotect(reinterpret_cast<void*>(address), size,
           host_accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
}

}  // namespace simcuda
