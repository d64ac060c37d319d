// Stream-ordered frees of managed spills (cuMemFreeAsync of a block the managed tier placed).
//
// Note [Stream-ordered frees of managed spills]
// cuMemFreeAsync must free in stream order: after the work queued before it on the stream, and
// without making the calling thread wait for that work (a program that queues a free and goes on
// may be the very thread that lets the stream proceed). The driver has no stream-ordered free for
// managed memory, and a host function queued on the stream may not call CUDA. So the free is
// queued as a host function that only hands the block to the shim's own thread
// ("vramspill-free"), which calls cuMemFree in the block's context and then gives its bytes back
// to the host budget: until then they stay counted (held a little longer, never too short).
// When the host function cannot be queued, the calling thread waits for the stream and frees.
// A managed spill that finds the host budget full first waits, a bounded time, for the frees
// already handed over: their streams are past them, and only this thread's cuMemFree (which may
// wait for the whole device, streams held by the program included, hence the bound) stands
// between their bytes and the budget.
// At exit, stop() waits for a free in progress, so that the thread is not inside the driver while
// it tears down; blocks still queued then are the process's to drop.
#pragma once

#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

namespace vramspill::tiers {

class ManagedFrees {
 public:
  // `free` is the managed tier's immediate free (cuMemFree_v2, then the budget released).
  using FreeNow = CUresult (*)(void* owner, CUdeviceptr pointer, uint64_t bytes);

  ManagedFrees(void* owner, FreeNow free_now) noexcept : owner_(owner), free_now_(free_now) {}
  ManagedFrees(const ManagedFrees&) = delete;
  ManagedFrees& operator=(const ManagedFrees&) = delete;

  // Frees `pointer` once the work queued on `stream` before this call has run.
  CUresult free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, CUstream stream) noexcept;

  // Waits up to `timeout` for the frees whose streams are past them to be done; false when there
  // were none.
  bool wait_for_due_frees(std::chrono::milliseconds timeout) noexcept;

  // Waits for a free in progress and stops the thread taking new ones (exit).
  void stop() noexcept;

 private:
  struct Pending {
    ManagedFrees* queue;
    CUdeviceptr pointer;
    uint64_t bytes;
    CUcontext context;
  };

  static void CUDA_CB hand_over(void* pending) noexcept;
  bool start_thread_locked() noexcept;
  void thread_main() noexcept;

  void* owner_;
  FreeNow free_now_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending*> ready_;  // guarded by mutex_
  bool freeing_ = false;        // guarded by mutex_: the thread is inside free_now_
  bool stopping_ = false;       // guarded by mutex_
  bool thread_failed_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace vramspill::tiers
