#include "core/physical_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace simcuda {
namespace {

// Far more than any simulated configuration holds at once; the file is sparse, so its size
// costs nothing until pages are written.
constexpr uint64_t kFileSpan = uint64_t{1} << 44;

}  // namespace

PhysicalMemory::PhysicalMemory() : offsets_(0, kFileSpan) {
  fd_ = memfd_create("simcuda-physical-memory", MFD_CLOEXEC);
  if (fd_ >= 0 && ftruncate(fd_, static_cast<off_t>(kFileSpan)) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

PhysicalMemory::~PhysicalMemory() {
  if (fd_ >= 0) close(fd_);
}

std::optional<uint64_t> PhysicalMemory::allocate(uint64_t size) {
  std::lock_guard lock(mutex_);
  return offsets_.allocate(size, static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
}

void PhysicalMemory::release(uint64_t offset, uint64_t size) {
  // Punching the hole zero-fills the range for its next owner and returns the pages.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(size));
  std::lock_guard lock(mutex_);
  offsets_.release(offset, size);
}

}  // namespace simcuda
