#include "core/physical_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

namespace simcuda {
namespace {

// Far more than any simulated configuration holds at once; the file is sparse, so its size
// costs nothing until pages are written.
constexpr uint64_t kFileSpan = uint64_t{1} << 44;

// Sizes the memfd to kFileSpan. A real driver's memory is no file, so a program run under a file
// size limit (`ulimit -S -f`) must not die of SIGXFSZ here: the soft limit is raised to the hard
// one for this one call and put back. Pages written through the mapping later are within the
// file's size and never meet the limit. A hard limit below the span still fails (no memory).
bool size_the_file(int fd) {
  struct rlimit limit {};
  const bool limited = getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
                       limit.rlim_cur < kFileSpan;
  if (!limited) return ftruncate(fd, static_cast<off_t>(kFileSpan)) == 0;
  const struct rlimit raised = {.rlim_cur = limit.rlim_max, .rlim_max = limit.rlim_max};
  const bool hard_allows = limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= kFileSpan;
  if (!hard_allows || setrlimit(RLIMIT_FSIZE, &raised) != 0) return false;
  const bool sized = ftruncate(fd, static_cast<off_t>(kFileSpan)) == 0;
  setrlimit(RLIMIT_FSIZE, &limit);
  return sized;
}

}  // namespace

PhysicalMemory::PhysicalMemory() : offsets_(0, kFileSpan) {
  fd_ = memfd_create("simcuda-physical-memory", MFD_CLOEXEC);
  if (fd_ >= 0 && !size_the_file(fd_)) {
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
