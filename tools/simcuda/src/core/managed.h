// Managed (unified) memory: pages that live on the host or on a device and move on access.
// A page has no contents, and lives nowhere in particular, until its first touch (Note [Pages
// before their first touch] in managed.cpp).
//
// Note [Managed pages]
// A managed allocation is one physical range mapped in both views (Note [Two views of device
// memory]); "migrating" a page moves no bytes, it moves the page's *residency*: the device whose
// VRAM it is charged to (Device::charge), whose LRU list it is on, and whether the host view is
// accessible. Residency is tracked per 2 MiB page (kManagedPage; the driver's VA-block size and
// simcuda's VMM granularity): coarser than the driver's 4-64 KiB migrations, so a sparse kernel
// access is charged a whole 2 MiB, but few enough pages that the host view's mprotect calls never
// approach the kernel's mapping-count limit.
//
// - A device-resident page's host view is PROT_NONE, so a host access faults; the SIGSEGV handler
//   (core/kernel_fault.h) calls handle_managed_host_fault, which moves the page back to the host.
// - A kernel touching a page not on its device migrates it there (a fault), evicting that device's
//   least recently migrated or touched managed pages to the host when VRAM is full; cuMemAlloc
//   under pressure evicts them too (the Device reclaimer). Memory from cuMemAlloc is never evicted.
// - Advice (cuMemAdvise), as its documentation has it: a page in its preferred location, or
//   accessed-by the device, is mapped where it lives and read over the link (zero-copy) instead
//   of migrating, whether it lives on the host or on another device (over the peer link, charged
//   at the link's rate: every pair of devices can access each other as peers here). A page
//   elsewhere migrates to the kernel's device.
//   A read-mostly page migrated to a device keeps a read-only host copy (host reads do not fault,
//   host writes do and collapse the copies).
// - The model is the same with CONCURRENT_MANAGED_ACCESS=0, where the real driver migrates every
//   managed allocation at each launch and a host access while a kernel runs is a fatal error;
//   simcuda keeps page-granular, concurrent semantics there.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/allocations.h"
#include "core/device_memory.h"

namespace simcuda {

class Device;
struct Context;

constexpr uint64_t kManagedPage = kLargePage;
// CU_DEVICE_CPU and CU_DEVICE_INVALID: where a page is or should be, as the driver numbers it.
constexpr int kHostLocation = -1;
constexpr int kNoLocation = -2;

// Before a kernel on `device` touches [address, address + size) of the managed allocation
// `managed`: pages resident elsewhere migrate to the device (evicting others if VRAM is full),
// counted as faults and migrated bytes. Returns the modeled seconds the migrations take.
double migrate_managed_for_device_access(Device& device, const Allocation& managed,
                                         uint64_t address, uint64_t size);

// The latest modeled time at which a prefetch brings a page of [address, address + size) of
// `managed` to `device`, of the pages on it now; 0 when none is arriving (Note [Waiting for a
// prefetch] in managed.cpp).
double managed_arrival(const Allocation& managed, uint64_t address, uint64_t size, int device);

// Bytes of [address, address + size) of `managed` resident in `device`'s memory now (another
// device's pages are reached over a link, not in this device's memory).
uint64_t managed_bytes_on_device(const Allocation& managed, uint64_t address, uint64_t size,
                                 int device);

// cuMemAllocManaged: pages start on the host, nothing is charged to VRAM.
CUresult allocate_managed(Context& context, uint64_t size, unsigned int flags, CUdeviceptr* out);
// Forgets the pages of `managed` (uncharging device-resident ones) and unmaps it. The caller
// has removed it from the registry.
void release_managed(const Allocation& managed);

// The SIGSEGV path for a host access outside kernels: true when `address` is a managed page
// whose host view was protected and is now accessible again (the access is retried).
bool handle_managed_host_fault(void* address);

// Advice and prefetches on [address, address + size), which the caller checked lies inside one
// managed allocation. `location` is a device ordinal or kHostLocation.
void advise_managed(uint64_t address, uint64_t size, CUmem_advise advice, int location);
// Runs on a stream: moves the range's pages to `location`; returns the modeled seconds.
double prefetch_managed(uint64_t address, uint64_t size, int location);
// The program asked for a prefetch of the range to `location`: what LAST_PREFETCH_LOCATION
// reports from now on, whether or not the prefetch has begun (Note [The last prefetch location]
// in managed.cpp).
void note_prefetch_request(uint64_t address, uint64_t size, int location);

// What cuMemRangeGetAttribute reports for a range (every page must agree, else kNoLocation).
struct ManagedRangeAdvice {
  bool read_mostly = true;
  int preferred = kNoLocation;
  int last_prefetch = kNoLocation;
  uint64_t accessed_by = 0;  // bit d: device d; bit kHostBit: the host
};
constexpr int kHostBit = 63;
ManagedRangeAdvice managed_range_advice(uint64_t address, uint64_t size);

}  // namespace simcuda
