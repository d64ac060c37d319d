#include "tiers/stream_ordered_frees.h"

#include <new>

#include "driver/context_scope.h"
#include "driver/real_driver.h"
#include "telemetry/log.h"
#include "util/quiet_thread.h"

namespace vramspill::tiers {

CUresult StreamOrderedFrees::free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, int device,
                                                  CUstream stream) noexcept {
  const auto launch_host_func = VRAMSPILL_REAL(cuLaunchHostFunc);
  const auto get_current = VRAMSPILL_REAL(cuCtxGetCurrent);
  CUcontext context = nullptr;
  bool thread_ready = false;
  {
    const std::lock_guard lock(mutex_);
    thread_ready = start_thread_locked();
  }
  auto* pending = new (std::nothrow) Pending{this, pointer, bytes, device, nullptr};
  if (thread_ready && pending != nullptr && launch_host_func != nullptr &&
      get_current != nullptr && get_current(&context) == CUDA_SUCCESS && context != nullptr) {
    pending->context = context;
    if (launch_host_func(stream, &StreamOrderedFrees::hand_over, pending) == CUDA_SUCCESS)
      return CUDA_SUCCESS;
  }
  delete pending;
  // Could not queue it: wait for the stream instead, then free.
  if (const auto synchronize = VRAMSPILL_REAL(cuStreamSynchronize)) {
    if (const CUresult result = synchronize(stream); result != CUDA_SUCCESS) return result;
  }
  return free_now_(owner_, pointer, bytes, device);
}

void CUDA_CB StreamOrderedFrees::hand_over(void* pending) noexcept {
  // On the driver's callback thread: no CUDA calls here, only the hand-over.
  auto* block = static_cast<Pending*>(pending);
  StreamOrderedFrees& queue = *block->queue;
  try {
    const std::lock_guard lock(queue.mutex_);
    queue.ready_.push_back(block);
  } catch (...) {
    // Out of memory: the block stays allocated (and counted) for the rest of the process.
    delete block;
    return;
  }
  queue.changed_.notify_all();
}

bool StreamOrderedFrees::start_thread_locked() noexcept {
  if (thread_.joinable()) return true;
  if (stopping_ || thread_failed_) return false;
  try {
    thread_ = start_quiet_thread("vramspill-free", [this] { thread_main(); });
  } catch (...) {
    thread_failed_ = true;
    logging::warn("cannot start the thread for stream-ordered frees of managed spills and "
                  "tiered blocks: cuMemFreeAsync of such blocks waits for its stream instead");
  }
  return !thread_failed_;
}

bool StreamOrderedFrees::hold_off_captures(core::CaptureGate::Hold& held) noexcept {
  if (captures_ == nullptr) return true;
  if (gate_ == Gate::kLookOnly) return !captures_->capturing();
  held = captures_->hold_if_none();
  return held.owns_lock();
}

void StreamOrderedFrees::thread_main() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    // Note [Stream-ordered frees on the shim's thread]: the gate is taken without this queue's
    // lock, which a spill holding the gate may wait for (wait_for_a_due_free()).
    core::CaptureGate::Hold captures_held_off;
    lock.unlock();
    const bool may_free = hold_off_captures(captures_held_off);
    lock.lock();
    if (stopping_ || ready_.empty()) continue;
    if (!may_free) {
      changed_.wait_for(lock, kCapturePoll, [this] { return stopping_; });
      continue;
    }
    Pending* block = ready_.front();
    ready_.pop_front();
    freeing_ = true;
    lock.unlock();
    CUresult result = CUDA_SUCCESS;
    {
      // cuMemFree needs the block's context current; this thread has none of its own.
      const driver::ContextScope scope(block->context);
      result = free_now_(owner_, block->pointer, block->bytes, block->device);
    }
    if (result != CUDA_SUCCESS)
      logging::debug("stream-ordered free of {:#x} failed with error {}",
                     block->pointer, static_cast<int>(result));
    delete block;
    lock.lock();
    freeing_ = false;
    ++completed_;
    changed_.notify_all();
  }
}

bool StreamOrderedFrees::wait_for_a_due_free(std::chrono::milliseconds patience) noexcept {
  std::unique_lock lock(mutex_);
  if (ready_.empty() && !freeing_) return false;
  const uint64_t seen = completed_;
  return changed_.wait_for(lock, patience, [&] { return completed_ != seen; });
}

bool StreamOrderedFrees::drain(std::chrono::milliseconds patience) noexcept {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, patience, [this] {
    return (ready_.empty() && !freeing_) || stopping_ || thread_failed_;
  });
}

void StreamOrderedFrees::stop(std::chrono::steady_clock::time_point give_up_at) noexcept {
  {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
    if (!changed_.wait_until(lock, give_up_at, [this] { return !freeing_; }))
      logging::debug("exit: a stream-ordered free still waits for the device; not waiting for it");
  }
  // The thread returns at its next wake-up; it is never joined (threads may still free while the
  // process exits), so it is detached to let the std::thread go.
  if (thread_.joinable()) thread_.detach();
}

}  // namespace vramspill::tiers
