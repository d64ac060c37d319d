// Stream-ordered frees the driver cannot do itself: cuMemFreeAsync of a managed spill, or of a
// tiered block (hooks/tiered_allocation.h).
//
// Note [Stream-ordered frees on the shim's thread]
// cuMemFreeAsync must free in stream order: after the work queued before it on the stream, and
// without making the calling thread wait for that work (a program that queues a free and goes on
// may be the very thread that lets the stream proceed). The driver has no stream-ordered free for
// managed memory or for a tiered block's granules, and a host function queued on the stream may
// not call CUDA. So the free is queued as a host function that only hands the block to a thread
// of the shim's own ("vramspill-free"), which frees it in the block's context (the owner's
// FreeNow: cuMemFree and the host budget for a managed spill, the arena for a tiered block):
// until then its bytes stay counted (held a little longer, never too short).
// When the host function cannot be queued, the calling thread waits for the stream and frees.
// A managed spill that finds the host budget full first waits for the frees already handed over:
// their streams are past them, and only this thread's cuMemFree stands between their bytes and
// the budget. That cuMemFree waits for the whole device each time, so under load the queue can
// hold many blocks while other threads keep adding to it; the spill therefore retries after each
// free that completes, and gives up only after a whole bound without one (the device may be held
// by the program's own streams, which is why there is a bound at all).
// At exit, stop() waits for a free in progress, so that the thread is not inside the driver while
// it tears down; blocks still queued then are the process's to drop. It waits until a deadline
// only: the free waits for the whole device, which work that never ends (a collective whose peer
// died) would hold for good, and the job must still end with its own exit status.
// While a stream capture is in progress (on any thread) the thread frees nothing: cuMemFree, and
// the waits a free makes, are among the calls a capture in global mode forbids on every thread, and
// the driver would refuse them and invalidate the capture. The blocks wait, still counted, and are
// freed once the captures have ended (the thread looks again every kCapturePoll). A capture cannot
// begin between the look and the free where the owner asks for the capture gate to be held through
// the free (the managed tier's frees): the thread holds it, which every cuStreamBeginCapture takes
// exclusively, from one through the other. Tiered blocks' frees take the placements' own locks,
// under which those placements take the gate; so that no thread takes the two in the other order,
// their frees are made without it, and a capture that begins while one of them is inside the driver
// is not waited for: that window is one free long, where before it was the whole capture.
#pragma once

#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "core/capture_gate.h"

namespace vramspill::tiers {

class StreamOrderedFrees {
 public:
  // The owner's immediate free of a block of `device`, called in the context current at its
  // cuMemFreeAsync.
  using FreeNow = CUresult (*)(void* owner, CUdeviceptr pointer, uint64_t bytes, int device);

  // Whether the capture gate is held from the look at the captures through the free, so that
  // none begins in between (Note [Stream-ordered frees on the shim's thread]).
  enum class Gate : uint8_t { kLookOnly, kHeldThroughFree };

  // `captures`: the stream captures in progress, during which nothing is freed; none when null.
  StreamOrderedFrees(void* owner, FreeNow free_now, core::CaptureGate* captures = nullptr,
                     Gate gate = Gate::kLookOnly) noexcept
      : owner_(owner), free_now_(free_now), captures_(captures), gate_(gate) {}

  // How often the thread looks whether the captures that hold its frees back have ended.
  static constexpr std::chrono::milliseconds kCapturePoll{2};
  StreamOrderedFrees(const StreamOrderedFrees&) = delete;
  StreamOrderedFrees& operator=(const StreamOrderedFrees&) = delete;

  // Frees `pointer`, a block of `device`, once the work queued on `stream` before this call has
  // run.
  CUresult free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, int device,
                                CUstream stream) noexcept;

  // Waits up to `patience` for one of the frees whose streams are past them to complete; false
  // when none is due or in progress, or none completed in time.
  bool wait_for_a_due_free(std::chrono::milliseconds patience) noexcept;

  // Waits up to `patience` until every free handed over so far is made: before a device reset,
  // which would take their memory first (Note [Resetting the device] in hooks/device_reset.h).
  // False when some were still waiting then (a capture in progress holds them back).
  bool drain(std::chrono::milliseconds patience) noexcept;

  // Waits for a free in progress, until `give_up_at` at most, and stops the thread taking new
  // ones (exit).
  void stop(std::chrono::steady_clock::time_point give_up_at) noexcept;

 private:
  struct Pending {
    StreamOrderedFrees* queue;
    CUdeviceptr pointer;
    uint64_t bytes;
    int device;  // the block's, which need not be the context's
    CUcontext context;
  };

  static void CUDA_CB hand_over(void* pending) noexcept;
  bool start_thread_locked() noexcept;
  void thread_main() noexcept;

  // The gate, held when gate_ asks, unless a capture is in progress; false while one is.
  bool hold_off_captures(core::CaptureGate::Hold& held) noexcept;

  void* owner_;
  FreeNow free_now_;
  core::CaptureGate* captures_;
  Gate gate_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending*> ready_;  // guarded by mutex_
  bool freeing_ = false;        // guarded by mutex_: the thread is inside free_now_
  uint64_t completed_ = 0;      // guarded by mutex_: frees done, for wait_for_a_due_free()
  bool stopping_ = false;       // guarded by mutex_
  bool thread_failed_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace vramspill::tiers
