// What driver calls cost the calling thread on the modeled host clock (Note [Host clock] in
// core/host_clock.h): the one table of those figures.
//
// Note [Host call costs]
// A driver call takes host time before it returns, and the thread queues nothing meanwhile. A
// mover that remaps blocks spends that time while the device waits for the next launch; a model
// that charged nothing for it showed a mover that spends 20x its copy time in remaps as fast.
// Measured on an H200 (driver 580, CUDA 13.0, PCIe Gen5; the medians of tools/demo/tier_probe.c and
// the hook benchmark, tests/shim/bench/hook_bench.cpp):
//
//   call                       per          device memory    host-located memory
//   cuMemMap                   2 MiB granule   1.0 us           0.9 us
//   cuMemSetAccess             2 MiB granule  26.9 us          59.0 us
//   cuMemUnmap                 2 MiB granule  18.0 us          33.3 us
//   a launch (queued)          call            3.7 us
//   cuMemAlloc + cuMemFree     pair of 4 KiB  77 us
//
// Host-located means CU_MEM_LOCATION_TYPE_HOST or HOST_NUMA(_CURRENT) handles. What is assumed,
// not measured (tools/simcuda/README.md, "Cost model", lists the same):
// - Only one granule per call was measured. A VMM call is charged per granule of the range it
//   covers, linear in the range, each granule at its own location's figure: what batching
//   ranges saves is for a GPU to show, not for the model to promise. SIMCUDA_VMM_COST=per-call
//   charges the other bound instead, one granule's figure for each location a range covers, so
//   that a mover's figures can be read under both until a GPU measures ranges.
// - cuMemAlloc and cuMemFree are charged per call, whatever the size: a 4 KiB pair was
//   measured, and charging a 1 GiB allocation 512 times that (20 ms) would make every plain
//   allocation of a job cost more than any report of cudaMalloc on a large block suggests.
// - The pair splits evenly: cuMemAlloc 38.5 us, cuMemFree 38.5 us. cuMemAllocPitch is charged
//   as cuMemAlloc, cuMemFreeAsync of that memory as cuMemFree; freeing managed or
//   stream-ordered memory costs nothing.
// - Every launch call costs what cuLaunchKernel does (Ex, cooperative, per-thread forms), also
//   while its stream captures.
// - A call is charged when it succeeds, as it returns: the work a launch queued may start before
//   the charge ends (the device has it once the call queued it), and what the thread queues
//   next starts no earlier. A failed call costs nothing.
#pragma once

#include <cstdint>

namespace simcuda {

// How many 2 MiB granules a call covers, by where their memory is.
struct GranuleCount {
  uint64_t device = 0;
  uint64_t host = 0;
};

// A cost per 2 MiB granule, by where the granule's memory is.
struct GranuleCost {
  double device_seconds = 0;
  double host_seconds = 0;
};

namespace host_cost {
inline constexpr GranuleCost kMemMap{.device_seconds = 1.0e-6, .host_seconds = 0.9e-6};
inline constexpr GranuleCost kMemSetAccess{.device_seconds = 26.9e-6, .host_seconds = 59.0e-6};
inline constexpr GranuleCost kMemUnmap{.device_seconds = 18.0e-6, .host_seconds = 33.3e-6};
inline constexpr double kLaunchSeconds = 3.7e-6;
inline constexpr double kMemAllocAndFreeSeconds = 77e-6;  // a pair, per call
inline constexpr double kMemAllocSeconds = kMemAllocAndFreeSeconds / 2;
inline constexpr double kMemFreeSeconds = kMemAllocAndFreeSeconds - kMemAllocSeconds;
}  // namespace host_cost

// Each advances the calling thread's modeled host clock by what the call cost.
void charge_vmm_call(const GranuleCost& cost, const GranuleCount& granules);
void charge_launch();
void charge_linear_allocation();  // cuMemAlloc, cuMemAllocPitch
void charge_linear_free();        // cuMemFree(Async) of that memory

}  // namespace simcuda
