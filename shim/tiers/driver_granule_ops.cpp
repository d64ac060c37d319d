#include "tiers/driver_granule_ops.h"

#include <array>
#include <mutex>
#include <new>
#include <optional>

#include "driver/context_scope.h"
#include "driver/device_work.h"
#include "driver/real_driver.h"
#include "driver/stream_capture.h"

namespace vramspill::tiers {
namespace {

CUmemAccessDesc read_write(int device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

}  // namespace

DriverGranuleOps::DriverGranuleOps(int device, int host_numa_node,
                                   core::CaptureGate* captures) noexcept
    : device_(device), host_numa_node_(host_numa_node), captures_(captures) {
  try {
    access_.push_back(read_write(device));
    const auto count_devices = VRAMSPILL_REAL(cuDeviceGetCount);
    const auto can_access_peer = VRAMSPILL_REAL(cuDeviceCanAccessPeer);
    int count = 0;
    if (count_devices == nullptr || can_access_peer == nullptr ||
        count_devices(&count) != CUDA_SUCCESS)
      return;  // the device alone: what cuMemAlloc gives before peer access is enabled
    for (int peer = 0; peer < count; ++peer) {
      int reachable = 0;
      if (peer != device && can_access_peer(&reachable, peer, device) == CUDA_SUCCESS &&
          reachable != 0)
        access_.push_back(read_write(peer));
    }
  } catch (const std::bad_alloc&) {  // map() refuses every granule then
  }
}

CUresult DriverGranuleOps::reserve(uint64_t bytes, CUdeviceptr* base) noexcept {
  const auto reserve_range = VRAMSPILL_REAL(cuMemAddressReserve);
  if (reserve_range == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  count_call();
  return reserve_range(base, bytes, kGranuleBytes, 0, 0);
}

CUresult DriverGranuleOps::unreserve(CUdeviceptr base, uint64_t bytes) noexcept {
  const auto free_range = VRAMSPILL_REAL(cuMemAddressFree);
  if (free_range == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  count_call();
  return free_range(base, bytes);
}

CUresult DriverGranuleOps::create(GranuleKind kind, uint64_t granules,
                                  GranuleHandle* handle) noexcept {
  const auto create_memory = VRAMSPILL_REAL(cuMemCreate);
  if (create_memory == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  if (kind == GranuleKind::kDevice) {
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
  } else if (host_numa_node_ >= 0) {
    prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, host_numa_node_};
  } else {
    prop.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  }
  CUmemGenericAllocationHandle created = 0;
  count_call();
  const CUresult result = create_memory(&created, granules * kGranuleBytes, &prop, 0);
  if (result == CUDA_SUCCESS) *handle = created;
  return result;
}

CUresult DriverGranuleOps::release(GranuleHandle handle) noexcept {
  const auto release_memory = VRAMSPILL_REAL(cuMemRelease);
  if (release_memory == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  count_call();
  return release_memory(handle);
}

CUresult DriverGranuleOps::map(CUdeviceptr address, std::span<const Mapping> mappings) noexcept {
  const auto map_memory = VRAMSPILL_REAL(cuMemMap);
  const auto set_access = VRAMSPILL_REAL(cuMemSetAccess);
  if (map_memory == nullptr || set_access == nullptr || VRAMSPILL_REAL(cuMemUnmap) == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (access_.empty()) return CUDA_ERROR_OUT_OF_MEMORY;
  std::size_t mapped = 0;
  uint64_t mapped_granules = 0;
  CUresult result = CUDA_SUCCESS;
  for (; mapped < mappings.size(); ++mapped) {
    const Mapping& mapping = mappings[mapped];
    count_call();
    result = map_memory(address + mapped_granules * kGranuleBytes,
                        mapping.granules * kGranuleBytes, 0, mapping.handle, 0);
    if (result != CUDA_SUCCESS) break;
    mapped_granules += mapping.granules;
  }
  if (result == CUDA_SUCCESS) {
    // One call for the run: the driver takes a range over several mappings.
    count_call();
    result = set_access(address, mapped_granules * kGranuleBytes, access_.data(), access_.size());
  }
  // A mapping nothing may reach is of no use, and the arena's books say it is not there.
  if (result != CUDA_SUCCESS && mapped > 0 && unmap(address, mapped_granules) != CUDA_SUCCESS) {
    CUdeviceptr at = address;
    for (const Mapping& mapping : mappings.first(mapped)) {
      unmap(at, mapping.granules);
      at += mapping.granules * kGranuleBytes;
    }
  }
  return result;
}

CUresult DriverGranuleOps::unmap(CUdeviceptr address, uint64_t granules) noexcept {
  const auto unmap_memory = VRAMSPILL_REAL(cuMemUnmap);
  if (unmap_memory == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  count_call();
  return unmap_memory(address, granules * kGranuleBytes);
}

DriverGranuleOps::~DriverGranuleOps() {
  if (primary_ == nullptr) return;
  const auto destroy_stream = VRAMSPILL_REAL(cuStreamDestroy_v2);
  const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2);
  if (destroy_stream != nullptr && destroy_event != nullptr) {
    const driver::ContextScope scope(primary_);
    if (scope.entered()) {
      destroy_stream(copy_stream_);
      destroy_stream(to_host_stream_);
      destroy_event(fork_event_);
      destroy_event(join_event_);
    }
  }
  driver::release_primary(reference_);
}

// Note [No moves during a capture] in placement/tiered_placement.h: the mover looked before it
// began, but a capture may have begun since, on another thread, and the wait would break it. So
// the wait is made holding the gate, once no capture is in progress; the move then stops.
// Called under the placement's and the arena's locks: the gate is only tried, never waited for,
// so that no thread holding it and taking those locks can close a cycle. Held exclusively (a
// capture is beginning), it counts as the capture in progress it is about to be.
template <typename Wait>
CUresult DriverGranuleOps::unless_capturing(Wait wait) noexcept {
  core::CaptureGate::Hold held;
  if (captures_ != nullptr) {
    held = captures_->try_hold_if_none();
    if (!held.owns_lock()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return wait();
}

// Note [Who may reach a granule]: a peer's kernels and copies may be using the granules that are
// about to move, and the device's own work is not theirs, so "the whole device" is each device
// that reaches them and is in use.
CUresult DriverGranuleOps::synchronize_device() noexcept {
  return unless_capturing([&] {
    CUresult result = driver::synchronize_device(device_);
    for (const CUmemAccessDesc& reach : access_) {
      const int peer = reach.location.id;
      if (result == CUDA_SUCCESS && peer != device_)
        result = driver::synchronize_device_if_active(peer);
    }
    return result;
  });
}

CUresult DriverGranuleOps::wait_for_stream_ends(std::span<const StreamEnd> ends) noexcept {
  return unless_capturing([&] { return driver::wait_for_stream_ends(device_, ends); });
}

CUresult DriverGranuleOps::make_copy_streams() noexcept {
  if (primary_ != nullptr) return CUDA_SUCCESS;
  const auto create_stream = VRAMSPILL_REAL(cuStreamCreate);
  const auto destroy_stream = VRAMSPILL_REAL(cuStreamDestroy_v2);
  const auto create_event = VRAMSPILL_REAL(cuEventCreate);
  const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2);
  if (create_stream == nullptr || destroy_stream == nullptr || create_event == nullptr ||
      destroy_event == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext primary = nullptr;
  driver::PrimaryReference reference;
  if (const CUresult result = driver::retain_primary(&primary, device_, reference);
      result != CUDA_SUCCESS)
    return result;
  // All four or none: each one made is given back if a later one fails.
  std::array<CUstream, 2> streams{};
  std::array<CUevent, 2> events{};
  CUresult result = CUDA_SUCCESS;
  {
    const driver::ContextScope scope(primary);
    result = scope.status();
    int made_streams = 0;
    int made_events = 0;
    while (result == CUDA_SUCCESS && made_streams < 2) {
      result = create_stream(&streams.at(made_streams), CU_STREAM_NON_BLOCKING);
      made_streams += result == CUDA_SUCCESS ? 1 : 0;
    }
    while (result == CUDA_SUCCESS && made_events < 2) {
      result = create_event(&events.at(made_events), CU_EVENT_DISABLE_TIMING);
      made_events += result == CUDA_SUCCESS ? 1 : 0;
    }
    if (result != CUDA_SUCCESS && scope.entered()) {
      for (int i = 0; i < made_streams; ++i) destroy_stream(streams.at(i));
      for (int i = 0; i < made_events; ++i) destroy_event(events.at(i));
    }
  }
  if (result != CUDA_SUCCESS) {
    driver::release_primary(reference);
    return result;
  }
  reference_ = reference;
  copy_stream_ = streams[0];
  to_host_stream_ = streams[1];
  fork_event_ = events[0];
  join_event_ = events[1];
  primary_ = primary;
  return CUDA_SUCCESS;
}

CUresult DriverGranuleOps::join_lanes() noexcept {
  to_host_forked_ = false;
  if (!to_host_unjoined_) return CUDA_SUCCESS;
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  if (record == nullptr || wait_event == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult result = record(join_event_, to_host_stream_);
  if (result == CUDA_SUCCESS) result = wait_event(copy_stream_, join_event_, 0);
  if (result == CUDA_SUCCESS) to_host_unjoined_ = false;
  return result;
}

CUresult DriverGranuleOps::begin_copies() noexcept {
  const std::lock_guard lanes(lanes_mutex_);
  if (primary_ == nullptr) return CUDA_SUCCESS;  // nothing was ever copied
  const driver::ContextScope scope(primary_);
  return scope.entered() ? join_lanes() : scope.status();
}

CUresult DriverGranuleOps::copy(CUdeviceptr destination, CUdeviceptr source, uint64_t bytes,
                                CopyLane lane) noexcept {
  const std::lock_guard lanes(lanes_mutex_);
  const auto copy_async = VRAMSPILL_REAL(cuMemcpyAsync);
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  if (copy_async == nullptr || record == nullptr || wait_event == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (const CUresult result = make_copy_streams(); result != CUDA_SUCCESS) return result;
  const driver::ContextScope scope(primary_);
  if (!scope.entered()) return scope.status();
  if (lane == CopyLane::kToDevice) return copy_async(destination, source, bytes, copy_stream_);
  if (!to_host_forked_) {
    // The lane's first copy of the epoch follows everything queued on the arena's stream.
    CUresult result = record(fork_event_, copy_stream_);
    if (result == CUDA_SUCCESS) result = wait_event(to_host_stream_, fork_event_, 0);
    if (result != CUDA_SUCCESS) return result;
    to_host_forked_ = true;
  }
  to_host_unjoined_ = true;
  return copy_async(destination, source, bytes, to_host_stream_);
}

CUresult DriverGranuleOps::wait_for_copies() noexcept {
  const std::lock_guard lanes(lanes_mutex_);
  const auto synchronize = VRAMSPILL_REAL(cuStreamSynchronize);
  if (synchronize == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (primary_ == nullptr) return CUDA_SUCCESS;  // nothing was ever copied
  return unless_capturing([&] {
    const driver::ContextScope scope(primary_);
    if (!scope.entered()) return scope.status();
    // Without the join, the host waits for each lane in turn.
    if (join_lanes() != CUDA_SUCCESS) {
      if (const CUresult result = synchronize(to_host_stream_); result != CUDA_SUCCESS)
        return result;
      to_host_unjoined_ = false;
    }
    return synchronize(copy_stream_);
  });
}

CUresult DriverGranuleOps::queue_copies_after(std::span<const uint64_t> events) noexcept {
  const std::lock_guard lanes(lanes_mutex_);
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  if (wait_event == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (const CUresult result = make_copy_streams(); result != CUDA_SUCCESS) return result;
  const driver::ContextScope scope(primary_);
  if (!scope.entered()) return scope.status();
  if (const CUresult result = join_lanes(); result != CUDA_SUCCESS) return result;
  // An event of another context of the device is fine: the wait crosses contexts.
  for (const uint64_t event : events) {
    if (const CUresult result = wait_event(copy_stream_, reinterpret_cast<CUevent>(event), 0);
        result != CUDA_SUCCESS)
      return result;
  }
  return CUDA_SUCCESS;
}

CUresult DriverGranuleOps::record_copies(uint64_t* event) noexcept {
  const std::lock_guard lanes(lanes_mutex_);
  if (const CUresult result = make_copy_streams(); result != CUDA_SUCCESS) return result;
  const driver::ContextScope scope(primary_);
  if (!scope.entered()) return scope.status();
  if (const CUresult result = join_lanes(); result != CUDA_SUCCESS) return result;
  return record_new_event(copy_stream_, event);
}

CUresult DriverGranuleOps::mark_copies(CopyLane lane, uint64_t* event) noexcept {
  const std::lock_guard lanes(lanes_mutex_);
  if (const CUresult result = make_copy_streams(); result != CUDA_SUCCESS) return result;
  const driver::ContextScope scope(primary_);
  return scope.entered() ? record_new_event(lane_stream(lane), event) : scope.status();
}

CUresult DriverGranuleOps::follow_mark(CopyLane lane, uint64_t event) noexcept {
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  if (wait_event == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const std::lock_guard lanes(lanes_mutex_);
  if (const CUresult result = make_copy_streams(); result != CUDA_SUCCESS) return result;
  const driver::ContextScope scope(primary_);
  if (!scope.entered()) return scope.status();
  return wait_event(lane_stream(lane), reinterpret_cast<CUevent>(event), 0);
}

CUresult DriverGranuleOps::record_new_event(CUstream stream, uint64_t* event) noexcept {
  const auto create = VRAMSPILL_REAL(cuEventCreate);
  const auto record = VRAMSPILL_REAL(cuEventRecord);
  const auto destroy = VRAMSPILL_REAL(cuEventDestroy_v2);
  if (create == nullptr || record == nullptr || destroy == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUevent recorded = nullptr;
  if (const CUresult result = create(&recorded, CU_EVENT_DISABLE_TIMING); result != CUDA_SUCCESS)
    return result;
  if (const CUresult result = record(recorded, stream); result != CUDA_SUCCESS) {
    destroy(recorded);
    return result;
  }
  *event = reinterpret_cast<uint64_t>(recorded);
  return CUDA_SUCCESS;
}

bool DriverGranuleOps::copies_done(uint64_t event) noexcept {
  const auto query = VRAMSPILL_REAL(cuEventQuery);
  return query != nullptr && unless_capturing([&] {
           return query(reinterpret_cast<CUevent>(event));
         }) == CUDA_SUCCESS;
}

void DriverGranuleOps::drop_event(uint64_t event) noexcept {
  if (const auto destroy = VRAMSPILL_REAL(cuEventDestroy_v2))
    destroy(reinterpret_cast<CUevent>(event));
}

void DriverGranuleOps::forget_context() noexcept {
  const std::lock_guard lanes(lanes_mutex_);
  if (primary_ == nullptr) return;
  // A reset does not release the reference the lanes took (cuda.h): it is given back here,
  // unless the shim gave it up (Note [The shim's references to primary contexts]).
  driver::release_primary(reference_);
  primary_ = nullptr;
  copy_stream_ = to_host_stream_ = nullptr;
  fork_event_ = join_event_ = nullptr;
  to_host_forked_ = to_host_unjoined_ = false;
}

// Note [Copies and captures]
// A submission to a stream being captured into a graph queues nothing now: its work runs when
// the graph is launched, and that launch, a submission of the blocks the graph names (or of
// every block, for a graph that could not be read), waits for the copies in flight then. So a
// capturing stream waits for nothing here; a wait would take the copy's event, recorded outside
// the capture, into it, which invalidates it (CUDA_ERROR_STREAM_CAPTURE_ISOLATION). Any other
// stream waits on the device, also while another stream captures. The host waits only where the
// device cannot, and never while a capture is in progress: cuEventSynchronize beside a capture
// is a potentially unsafe call, which invalidates a global-mode capture (PyTorch's NCCL watchdog
// broke its captures with cudaEventQuery: pytorch/pytorch#104487). Such a stream (the legacy
// stream, which answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream captures)
// gets the error, and the submission may read the block before its bytes are there: the
// program's own call on that stream breaks the capture in any case.
CUresult DriverGranuleOps::order_stream_after(uint64_t stream, uint64_t event,
                                              bool capturing) noexcept {
  const auto wait_event = VRAMSPILL_REAL(cuStreamWaitEvent);
  const auto synchronize = VRAMSPILL_REAL(cuEventSynchronize);
  if (wait_event == nullptr || synchronize == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const auto copied = reinterpret_cast<CUevent>(event);
  // No capture begins or ends between the look at the stream and the wait.
  core::CaptureGate::Hold held;
  if (captures_ != nullptr) held = captures_->hold();
  const std::optional<bool> stream_captures = driver::stream_capture_status(stream);
  if (stream_captures == true) return CUDA_SUCCESS;
  // The event is of the arena's context; the stream may be of any: the wait crosses contexts.
  if (stream_captures == false &&
      wait_event(reinterpret_cast<CUstream>(stream), copied, 0) == CUDA_SUCCESS)
    return CUDA_SUCCESS;
  if (capturing || (captures_ != nullptr && captures_->capturing()))
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return synchronize(copied);
}

}  // namespace vramspill::tiers
