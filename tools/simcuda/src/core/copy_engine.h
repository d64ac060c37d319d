// The copy engine: checking the pointers of copies and memsets at call time, and the work that
// performs them later on a stream's worker thread, through the shadow view (device_view()).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/stream.h"
#include "core/traffic.h"

namespace simcuda {

struct Context;

// Where a pointer lives, as the driver tells with unified addressing.
enum class MemoryPlace {
  kDevice,        // the simulated address space: device, managed and VMM memory
  kPinnedHost,    // page-locked host memory simcuda knows (cuMemHostAlloc, cuMemHostRegister)
  kPageableHost,  // any other host memory
};
MemoryPlace place_of(uint64_t address);

// CUDA_ERROR_INVALID_VALUE unless [address, address + size) lies inside live allocations
// (adjacent VMM mappings may share a range) that devices may `access`. The driver checks the
// ranges it knows; and a reserved but unmapped VMM range, or a write into a read-only VMM
// mapping, must be refused here, before a worker thread touches it.
CUresult check_range(uint64_t address, uint64_t size, Access access);

// A pointer the program passes as host memory: NULL is refused, device-side memory is checked
// like check_range() (unified addressing lets a device pointer stand in), and anything else is
// host memory the driver cannot check. On success `*place` says which.
CUresult check_host_pointer(uint64_t address, uint64_t size, Access access, MemoryPlace* place);

// A pitched copy; a linear copy is one row.
struct Copy2D {
  uint64_t dst = 0;
  uint64_t dst_pitch = 0;
  uint64_t src = 0;
  uint64_t src_pitch = 0;
  uint64_t width = 0;  // bytes per row
  uint64_t height = 1;
};

// The bytes a pitched region spans from its first byte; UINT64_MAX when that does not fit in
// 64 bits, which check_range() then refuses.
inline uint64_t region_extent(uint64_t pitch, uint64_t width, uint64_t height) {
  uint64_t rows = 0, extent = 0;
  if (height == 0) return 0;
  if (__builtin_mul_overflow(pitch, height - 1, &rows) ||
      __builtin_add_overflow(rows, width, &extent))
    return UINT64_MAX;
  return extent;
}

// Copies the source rows now into a staging buffer and points `copy` at it, as the driver stages
// a pageable source so that the program may reuse it as soon as an asynchronous copy returns.
// The returned buffer must outlive the work.
std::shared_ptr<std::vector<unsigned char>> stage_source(Copy2D& copy);

// The work performing `copy` for `context` (which outlives it); its modeled time is the source
// read plus the destination write (account_access(), Engine::kCopy; a device-to-device copy moves
// its bytes through HBM twice). A copy between two pageable host buffers involves no device and
// costs nothing.
// Note [Copy faults]: the checks above happen at the call, the bytes move later. Device memory
// that is freed, unmapped or made read-only in between makes the copy fault on the worker
// thread: the bytes move under run_guarded (Note [Kernel faults] in kernel_fault.h), and a fault
// on device memory poisons the context with CUDA_ERROR_ILLEGAL_ADDRESS, as a faulting copy does
// on a GPU, instead of killing the process. A fault on host memory (a bad pageable pointer, which
// the driver cannot check either) still kills the process, as the driver's CPU-side copy of
// pageable memory would. Like kernels, copies and memsets of a poisoned context do not run.
StreamWork copy_work(Context& context, Copy2D copy,
                     std::shared_ptr<std::vector<unsigned char>> staging = nullptr);
// The ranges a copy reads and writes, for Note [Remap protocol] in remap_check.h.
Footprint copy_footprint(const Copy2D& copy);

struct Fill {
  uint64_t dst = 0;
  uint64_t pitch = 0;
  uint64_t width = 0;  // elements per row
  uint64_t height = 1;
  unsigned element_size = 1;  // 1, 2 or 4
  uint32_t value = 0;
};

// The work performing a memset. The driver fills memory with a kernel on the device, so it is
// accounted as a device-side write (Engine::kKernel): managed pages migrate to the device first,
// and writes to pinned host memory cross the link as zero-copy traffic. Faults as in
// Note [Copy faults].
StreamWork fill_work(Context& context, Fill fill);
Footprint fill_footprint(const Fill& fill);

// The work of cuStreamWriteValue32/64: `bytes` (4 or 8) of `value` written at `address`, costed
// and faulting as a memset of them.
StreamWork value_write_work(Context& context, uint64_t address, uint64_t value, unsigned bytes);

// Note [Waiting for a value]
// cuStreamWaitValue32/64 hold their stream until the `bytes` (4 or 8) at `address` meet
// `condition` (CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND or _NOR) against `value`. The stream's worker
// reads the memory every 50 us (guarded: a fault poisons the context, as a copy's does) until they
// do, or until its context is destroyed or reset, which a GPU's never-met wait would hang
// instead. The wait's modeled end is when a cuStreamWriteValue wrote the value it saw, if that is
// after the wait's modeled start; a value written by a kernel, a copy or the host ends it at its
// start (assumed: nothing here tells when those wrote it).
StreamWork value_wait_work(Context& context, uint64_t address, uint64_t value, unsigned bytes,
                           unsigned condition);

}  // namespace simcuda
