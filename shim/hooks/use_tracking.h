// What each submission hook (hooks/submission_hooks.cpp) tells the use tracker
// (core/use_tracker.h): the kernel arguments' words, a copy's or memset's ranges, or "may touch
// everything". Each record_* fills `use` with the blocks the submission touches, which is what
// tiered mode promotes before the call reaches the driver (shim/README.md, "Use tracking").
#pragma once

#include <cuda.h>

#include <atomic>

#include "core/copy_ranges.h"
#include "core/use_tracker.h"
#include "hooks/shim_state.h"

namespace vramspill::hooks {

// The shim's state when its use tracker tracks something, else null: the submission hooks' whole
// fast path, one load for the state and one relaxed load for the tracker (Note [Use lookups take
// no lock] in core/use_tracker.h).
inline ShimState* tracking_state() noexcept {
  ShimState* shim = initialised_state.load(std::memory_order_acquire);
  if (shim == nullptr || shim->use.idle()) [[likely]] return nullptr;
  return shim;
}

// The stream a call names, as the tracker records it: a null stream in a per-thread (_ptds,
// _ptsz) call is the thread's own default stream, CU_STREAM_PER_THREAD; synchronous calls name
// the default stream of their kind.
inline uint64_t stream_id(CUstream stream, bool per_thread) noexcept {
  if (stream == nullptr && per_thread) stream = CU_STREAM_PER_THREAD;
  return reinterpret_cast<uintptr_t>(stream);
}

// A kernel launch: its arguments' words (Note [Reading a launch's arguments] in
// core/launch_arguments.h), or everything when they cannot be read.
void record_kernel(ShimState& shim, CUfunction function, uint64_t stream,
                   void** kernel_params, void** extra, core::SubmissionUse& use) noexcept;
// A graph launch: what its exec's nodes touch (Note [Reading a graph] in core/graph_uses.h), or
// everything when they were not read, counted as an unreadable launch.
void record_graph(ShimState& shim, CUgraphExec exec, uint64_t stream,
                  core::SubmissionUse& use) noexcept;
void record_ranges(ShimState& shim, uint64_t stream,
                   std::initializer_list<core::AddressRange> ranges,
                   core::SubmissionUse& use) noexcept;
// cuMemcpy2D/3D(Peer)'s source and destination, where they are linear memory.
void record_copy(ShimState& shim, uint64_t stream, const CUDA_MEMCPY2D* copy,
                 core::SubmissionUse& use) noexcept;
void record_copy(ShimState& shim, uint64_t stream, const CUDA_MEMCPY3D* copy,
                 core::SubmissionUse& use) noexcept;
void record_copy(ShimState& shim, uint64_t stream, const CUDA_MEMCPY3D_PEER* copy,
                 core::SubmissionUse& use) noexcept;
// cuMemcpyBatchAsync's pairs.
void record_batch(ShimState& shim, uint64_t stream, const CUdeviceptr* destinations,
                  const CUdeviceptr* sources, const size_t* sizes, size_t count,
                  core::SubmissionUse& use) noexcept;

using core::pitched;  // the pitched memsets' ranges (core/copy_ranges.h)

// A module or library is being unloaded: the layouts cached for its functions must go (Note [The
// parameter layout cache] in core/launch_arguments.h).
void forget_parameter_layouts() noexcept;

}  // namespace vramspill::hooks
