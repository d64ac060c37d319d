// The granule arena's VMM calls on the real driver (tiers/granule_ops.h), for one device.
//
// Note [Who may reach a granule]
// Memory from cuMemAlloc is reachable from every device that has peer access to its device;
// VMM memory is reachable only from the devices cuMemSetAccess names. A program that enabled
// peer access and hands a tiered block to a kernel on another device must not fault where the
// same program without vramspill works, so every granule is made accessible to its own device
// and to every device that can access it as a peer (cuDeviceCanAccessPeer), asked once. That is
// more than cuMemAlloc gives before cuCtxEnablePeerAccess, never less.
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "core/capture_gate.h"
#include "driver/primary_context.h"
#include "tiers/granule_ops.h"

namespace vramspill::tiers {

class DriverGranuleOps final : public GranuleOps {
 public:
  // Device granules on `device`; host granules on the host NUMA node `host_numa_node`
  // (CU_MEM_LOCATION_TYPE_HOST_NUMA), or anywhere on the host (CU_MEM_LOCATION_TYPE_HOST) when
  // it is negative. `captures` (Note [The capture gate]): held while a program's stream is made
  // to wait, and while the device or a program's stream is waited for, which is done only when
  // no capture is in progress; null where no program captures (the tools and tests of the arena
  // alone).
  DriverGranuleOps(int device, int host_numa_node, core::CaptureGate* captures = nullptr) noexcept;
  // Gives back the copy stream and the primary context it lives in.
  ~DriverGranuleOps();
  DriverGranuleOps(const DriverGranuleOps&) = delete;
  DriverGranuleOps& operator=(const DriverGranuleOps&) = delete;

  CUresult reserve(uint64_t bytes, CUdeviceptr* base) noexcept override;
  CUresult unreserve(CUdeviceptr base, uint64_t bytes) noexcept override;
  CUresult create(GranuleKind kind, uint64_t granules, GranuleHandle* handle) noexcept override;
  CUresult release(GranuleHandle handle) noexcept override;
  CUresult map(CUdeviceptr address, std::span<const Mapping> mappings) noexcept override;
  CUresult unmap(CUdeviceptr address, uint64_t granules) noexcept override;
  uint64_t vmm_calls() const noexcept override {
    return vmm_calls_.load(std::memory_order_relaxed);
  }
  CUresult synchronize_device() noexcept override;
  CUresult wait_for_stream_ends(
      std::span<const StreamEnd> ends) noexcept override;
  // On the lane's stream, of the arena's own, created at the first copy in the device's primary
  // context (which the arena retains): a program's streams and contexts come and go. The
  // to-device lane's stream is the arena's stream; the to-host lane's forks from it at its first
  // copy of an epoch and joins it when the epoch ends (Note [Two copy lanes] in
  // tiers/granule_ops.h), so that the arena's stream ends after every copy.
  CUresult begin_copies() noexcept override;
  CUresult copy(CUdeviceptr destination, CUdeviceptr source, uint64_t bytes,
                CopyLane lane) noexcept override;
  CUresult wait_for_copies() noexcept override;
  CUresult queue_copies_after(std::span<const uint64_t> events) noexcept override;
  CUresult record_copies(uint64_t* event) noexcept override;
  CUresult mark_copies(CopyLane lane, uint64_t* event) noexcept override;
  CUresult follow_mark(CopyLane lane, uint64_t event) noexcept override;
  bool copies_done(uint64_t event) noexcept override;
  void drop_event(uint64_t event) noexcept override;
  // From any thread (a submission, in its own context): it touches no member.
  CUresult order_stream_after(uint64_t stream, uint64_t event, bool capturing) noexcept override;
  void forget_context() noexcept override;

 private:
  // The lanes' streams and events, made at the first use; CUDA_SUCCESS once they are.
  CUresult make_copy_streams() noexcept;
  // Makes the arena's stream wait for the to-host lane's copies, if it has any it does not yet
  // follow, and ends the epoch; in the primary context.
  CUresult join_lanes() noexcept;
  void count_call() noexcept { vmm_calls_.fetch_add(1, std::memory_order_relaxed); }
  // `wait()`'s result, made holding the capture gate; CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
  // without it, while a capture is in progress.
  template <typename Wait>
  CUresult unless_capturing(Wait wait) noexcept;

  int device_;
  int host_numa_node_;
  core::CaptureGate* captures_;
  // Note [Who may reach a granule]: the device and its peers.
  std::vector<CUmemAccessDesc> access_;
  // The stream of `lane`.
  CUstream lane_stream(CopyLane lane) const noexcept {
    return lane == CopyLane::kToDevice ? copy_stream_ : to_host_stream_;
  }
  // Records a new event on `stream` at *event; the caller holds lanes_mutex_ in the primary
  // context.
  static CUresult record_new_event(CUstream stream, uint64_t* event) noexcept;

  // The copy lanes' state, which begin_copies(), copy(), wait_for_copies(), queue_copies_after(),
  // record_copies(), mark_copies() and follow_mark() use under lanes_mutex_: the arena calls them with its move lock held,
  // except an allocation's wait for the copies (GranuleArena::take_pieces()), which may come
  // from another thread meanwhile.
  std::mutex lanes_mutex_;
  CUcontext primary_ = nullptr;
  driver::PrimaryReference reference_;  // to primary_
  CUstream copy_stream_ = nullptr;     // the to-device lane, and the arena's stream
  CUstream to_host_stream_ = nullptr;  // the to-host lane
  CUevent fork_event_ = nullptr;       // recorded on the arena's stream, waited for by the lane
  CUevent join_event_ = nullptr;       // the other way round
  bool to_host_forked_ = false;        // in this epoch
  bool to_host_unjoined_ = false;      // copies on the to-host lane the arena's stream may not follow
  std::atomic<uint64_t> vmm_calls_{0};
};

}  // namespace vramspill::tiers
