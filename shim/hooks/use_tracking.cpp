#include "hooks/use_tracking.h"

#include <array>
#include <atomic>

#include "core/launch_arguments.h"
#include "driver/real_driver.h"
#include "telemetry/log.h"

namespace vramspill::hooks {
namespace {

// CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER name their two sides with the same fields.
template <typename Copy3D>
void record_3d_copy(ShimState& shim, uint64_t stream, const Copy3D& c,
                    core::SubmissionUse& use) noexcept {
  const std::array<core::AddressRange, 2> ranges = core::copy_3d_ranges(c);
  shim.use.record_ranges(stream, ranges, use);
}

// Note [Counting launches] in core/use_tracker.h: once more than 1% of at least
// kLaunchesBeforeWarning launches could not be read, tiered mode is deciding blind; say so once,
// with the reason of the launch that crossed the line.
void warn_if_many_unreadable(ShimState& shim, core::ArgumentsRead why) noexcept {
  constexpr uint64_t kLaunchesBeforeWarning = 100;
  static constinit std::atomic<bool> warned{false};
  if (warned.load(std::memory_order_relaxed)) return;
  const core::LaunchCounts counts = shim.use.launch_counts();
  if (counts.launches < kLaunchesBeforeWarning || counts.unreadable * 100 <= counts.launches)
    return;
  if (warned.exchange(true)) return;
  logging::warn(
      "{} of {} kernel launches had arguments the shim could not read ({}): tiered mode takes "
      "each as touching every block, so its policy cannot see what they use and it waits for "
      "them before any move",
      counts.unreadable, counts.launches, core::describe(why));
}

}  // namespace

void record_kernel(ShimState& shim, CUfunction function, uint64_t stream, void** kernel_params,
                   void** extra, core::SubmissionUse& use) noexcept {
  // Either query may be missing (before CUDA 12.4): Note [Kernels launched as functions].
  const core::LayoutQueries queries{.function = VRAMSPILL_REAL(cuFuncGetParamInfo),
                                    .kernel = VRAMSPILL_REAL(cuKernelGetParamInfo)};
  core::LaunchWords words;
  const core::ArgumentsRead read =
      core::argument_words(function, kernel_params, extra, shim.launch_layouts, queries, words);
  if (read != core::ArgumentsRead::kRead) [[unlikely]] {
    shim.use.record_unreadable_launch(stream, use);
    warn_if_many_unreadable(shim, read);
    return;
  }
  shim.use.record_words(stream, words.view(), use);
}

void record_graph(ShimState& shim, CUgraphExec exec, uint64_t stream,
                  core::SubmissionUse& use) noexcept {
  const std::shared_ptr<const core::GraphUses> uses = shim.graph_uses.find(exec);
  if (uses == nullptr || uses->read != core::GraphRead::kRead) [[unlikely]] {
    shim.use.record_unreadable_launch(stream, use);
    return;
  }
  shim.use.record_graph(stream, uses->words, uses->ranges, use);
}

void record_ranges(ShimState& shim, uint64_t stream,
                   std::initializer_list<core::AddressRange> ranges,
                   core::SubmissionUse& use) noexcept {
  shim.use.record_ranges(stream, {ranges.begin(), ranges.size()}, use);
}

void record_copy(ShimState& shim, uint64_t stream, const CUDA_MEMCPY2D* copy,
                 core::SubmissionUse& use) noexcept {
  if (copy == nullptr) return;  // the driver's to refuse
  const CUDA_MEMCPY2D& c = *copy;
  record_ranges(shim, stream,
                {core::copy_side(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, 0,
                                 c.srcPitch, 0, c.WidthInBytes, c.Height, 1),
                 core::copy_side(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, 0,
                                 c.dstPitch, 0, c.WidthInBytes, c.Height, 1)},
                use);
}

void record_copy(ShimState& shim, uint64_t stream, const CUDA_MEMCPY3D* copy,
                 core::SubmissionUse& use) noexcept {
  if (copy != nullptr) record_3d_copy(shim, stream, *copy, use);
}

void record_copy(ShimState& shim, uint64_t stream, const CUDA_MEMCPY3D_PEER* copy,
                 core::SubmissionUse& use) noexcept {
  if (copy != nullptr) record_3d_copy(shim, stream, *copy, use);
}

void record_batch(ShimState& shim, uint64_t stream, const CUdeviceptr* destinations,
                  const CUdeviceptr* sources, const size_t* sizes, size_t count,
                  core::SubmissionUse& use) noexcept {
  // Ranges on the stack, so a batch larger than that is taken as touching everything.
  constexpr size_t kMaxPairs = 64;
  if (destinations == nullptr || sources == nullptr || sizes == nullptr) return;
  if (count > kMaxPairs) {
    shim.use.record_everything(stream, use);
    return;
  }
  std::array<core::AddressRange, 2 * kMaxPairs> ranges;
  for (size_t index = 0; index < count; ++index) {
    ranges[2 * index] = {destinations[index], sizes[index]};
    ranges[2 * index + 1] = {sources[index], sizes[index]};
  }
  shim.use.record_ranges(stream, {ranges.data(), 2 * count}, use);
}

void forget_parameter_layouts() noexcept {
  if (ShimState* state = initialised_state.load(std::memory_order_acquire); state != nullptr)
    state->launch_layouts.forget_all();
}

}  // namespace vramspill::hooks
