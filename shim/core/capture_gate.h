// The stream captures in progress and the gate that holds new ones off: what every part of the
// shim asks before a call that a capture forbids.
//
// Note [The capture gate]
// In global capture mode (PyTorch's default for CUDA graphs) a capture is invalidated by a call
// it forbids made on any thread: a wait for the device or a stream, a query, cuMemFree,
// cuMemAllocManaged, pinning and unpinning. A look at the count before such a call is not enough:
// another thread may begin a capture between the look and the call. So the hooks that begin a
// capture, end one or destroy a stream being captured change the count only holding the gate
// exclusively (change()), and the shim makes a forbidden call only holding it shared, once no
// capture is in progress (hold_if_none(), or try_hold_if_none() where waiting for the gate could
// close a lock cycle). A record on, or a wait from, a program's stream is made holding it
// (hold()) after asking that stream whether it captures (driver/stream_capture.h), for the same
// reason. A look alone (capturing()) serves a decision that no forbidden call follows.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>

#include "core/capture_origins.h"

namespace vramspill::core {

class CaptureGate {
 public:
  using Hold = std::shared_lock<std::shared_mutex>;
  using Change = std::unique_lock<std::shared_mutex>;

  CaptureGate() noexcept = default;
  CaptureGate(const CaptureGate&) = delete;
  CaptureGate& operator=(const CaptureGate&) = delete;

  // Whether a capture is in progress, as of now; a capture may begin right after.
  bool capturing() const noexcept { return count_.load(std::memory_order_acquire) != 0; }

  // No capture begins, ends or is counted while the hold lives.
  [[nodiscard]] Hold hold() { return Hold(mutex_); }

  // A hold when no capture is in progress; an empty one (owns_lock() false) while one is.
  [[nodiscard]] Hold hold_if_none() {
    Hold held(mutex_);
    if (capturing()) held.unlock();
    return held;
  }

  // As hold_if_none(), without waiting for the gate: empty also while a capture is beginning or
  // ending, which counts as the capture in progress it is about to be, or just was.
  [[nodiscard]] Hold try_hold_if_none() {
    Hold held(mutex_, std::try_to_lock);
    if (held.owns_lock() && capturing()) held.unlock();
    return held;
  }

  // For the hooks that begin and end captures (Note [Counting captures]): held across the
  // driver's call and the begun()/ended() after it.
  [[nodiscard]] Change change() { return Change(mutex_); }
  // Each holding change().
  void begun(uint64_t stream, uint64_t context) noexcept { origins_.begun(stream, context); }
  void ended(uint64_t stream, uint64_t context) noexcept { origins_.ended(stream, context); }
  void context_ended(uint64_t context) noexcept { origins_.context_ended(context); }

 private:
  std::shared_mutex mutex_;
  std::atomic<int> count_{0};
  CaptureOrigins origins_{count_};  // guarded by mutex_, held exclusively
};

}  // namespace vramspill::core
