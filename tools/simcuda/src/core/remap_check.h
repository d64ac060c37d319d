// Checking the remap protocol: the rule a program (the shim's tiered mode above all) must follow
// to move a VMM range between device and host physical memory at the same address.
//
// Note [Remap protocol]
// A granule may be remapped only when no queued or running work can touch it. On a GPU, work
// queued before a cuMemUnmap and run after it faults or, worse, reads and writes whatever
// physical memory is mapped there by then: the new handle's bytes, silently. A test on simcuda
// would pass or fail by the workers' timing, so simcuda checks the rule itself:
// - Each piece of stream work carries its footprint (core/stream.h): a copy's source and
//   destination, a memset's destination, a kernel's argument ranges (KernelDef::touches, the
//   same ranges the cost model charges, unclipped), a graph launch's recorded footprints. The
//   streams keep the footprints of their queued and running work; queuing costs a small vector,
//   and only the remapping calls search them.
// - A successful cuMemUnmap, cuMemMap, or cuMemSetAccess that takes access away (that makes
//   queued work fault, Note [Copy faults] in copy_engine.h; granting access breaks nothing, and
//   programs grant peers access to memory in use) whose range overlaps the footprint of queued or
//   running work on any stream of any context is a violation.
// - So is a cuMemFree of a stream-ordered block (cuMemAllocAsync, cuMemAllocFromPoolAsync) while
//   queued or running work can touch it: the driver does not synchronise for such a free, and
//   the pool may hand the memory out again at once (cuda.h: "Callers must ensure that all
//   accesses to these pointer have completed before invoking cuMemFree").
// - Work that touches a granule that was mapped once and is unmapped now (a remap in progress)
//   is a violation as well as the fault it already was (CUDA_ERROR_ILLEGAL_ADDRESS when it runs;
//   CUDA_ERROR_INVALID_VALUE for a copy or memset refused at the call).
// Each violation prints one line on standard error (what, by which call or work, and the
// pending work that overlapped) and counts in remap_violations (the statistics file, and
// simcuda_remap_violations() in-process). One remap done wrong while work is queued counts once
// per call (the unmap and the map) and once more if the work then faults. With
// SIMCUDA_REMAP_VIOLATIONS=abort the process aborts after the line instead, so that a test which
// breaks the rule cannot pass.
#pragma once

#include <cstdint>

namespace simcuda {

// After `call` ("cuMemUnmap", ...) succeeded on [address, address + size): a violation when
// queued or running work can touch the range.
void check_remap(const char* call, uint64_t address, uint64_t size);

// `what` (a kernel's name, "copy", ...) touched `address` (a program or shadow-view address)
// and faulted, or was refused there: a violation when a remap is in progress at that address.
void check_touch_during_remap(const char* what, uint64_t address);

// Violations so far, in this process.
uint64_t remap_violations();

}  // namespace simcuda
