#include "core/submit.h"

#include <algorithm>

#include "core/capture.h"
#include "core/context.h"
#include "core/host_clock.h"

namespace simcuda {

namespace {

// Whether `stream` is a live stream of any live context (Note [Streams of other contexts]).
bool any_context_owns(const Stream* stream) {
  bool owned = false;
  for_each_context([&](Context& context) { owned = owned || context.owns_stream(stream); });
  return owned;
}

}  // namespace

CUresult resolve_stream(CUstream handle, DefaultStream null_means, Stream** out,
                        StreamScope scope) {
  Context* context = current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (handle == CU_STREAM_LEGACY || (handle == nullptr && null_means == DefaultStream::kLegacy)) {
    *out = &context->legacy_stream();
  } else if (handle == CU_STREAM_PER_THREAD || handle == nullptr) {
    *out = &context->per_thread_stream();
  } else {
    auto* stream = reinterpret_cast<Stream*>(handle);
    if (!context->owns_stream(stream) &&
        (scope == StreamScope::kCurrentContext || !any_context_owns(stream)))
      return CUDA_ERROR_INVALID_HANDLE;
    *out = stream;
  }
  return CUDA_SUCCESS;
}

uint64_t submit(Stream& stream, StreamWork work, std::vector<StreamPoint> extra_waits,
                Footprint footprint, double not_before) {
  Context& context = *stream.context();
  std::vector<StreamPoint> waits = std::move(extra_waits);
  if (stream.kind() == Stream::Kind::kLegacyDefault) {
    std::vector<StreamPoint> tails = context.blocking_stream_tails();
    waits.insert(waits.end(), tails.begin(), tails.end());
  } else if (stream.blocking()) {
    waits.push_back(context.legacy_stream().tail());
  }
  return stream.enqueue(std::move(work), std::move(waits), std::move(footprint),
                        std::max(host_clock(), not_before));
}

CUresult submit_async(Stream& stream, StreamWork work, Placement* placement, Footprint footprint,
                      std::shared_ptr<GraphNode> node) {
  Placement placed;
  if (CUresult result = capture_work(stream, work, &placed.capture_id, footprint, std::move(node));
      result != CUDA_SUCCESS)
    return result;
  if (placed.capture_id == 0)
    placed.sequence = submit(stream, std::move(work), {}, std::move(footprint));
  if (placement != nullptr) *placement = placed;
  return CUDA_SUCCESS;
}

CUresult submit_sync(Stream& stream, StreamWork work, bool wait, Footprint footprint) {
  if (CUresult result = check_unsafe_call(); result != CUDA_SUCCESS) return result;
  if (CUresult result = check_sync(stream); result != CUDA_SUCCESS) return result;
  const uint64_t sequence = submit(stream, std::move(work), {}, std::move(footprint));
  if (wait) host_wait({&stream, sequence});
  return CUDA_SUCCESS;
}

}  // namespace simcuda
