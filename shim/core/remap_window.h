// The remap window: the moment tiered mode may change which physical memory backs a granule.
//
// Note [Remap window]
// A granule may be remapped only when no queued or running work can touch it: work queued before
// a cuMemUnmap and run after it would fault, or read and write whatever is mapped there by then.
// The safe window, always correct whatever the program hides from the shim:
//   1. every submission hook (launches, copies, memsets, graph launches, host functions) holds a
//      Submission while it hands work to the driver;
//   2. the mover closes the window: new submissions wait, and close() returns once every
//      Submission in flight has left, with an Exclusive token;
//   3. holding the token, the mover synchronises the device's work, moves and remaps a batch,
//      and the window opens again when the token goes.
// Only close() can make an Exclusive, and the mover's remapping calls take one as a parameter,
// so no code path remaps outside the window.
//
// The cost lands on the mover, not on submissions, which are the hot path: a Submission is one
// atomic increment of a counter on a cache line of its own (one of kStripes, chosen by thread)
// and one load of the closed flag, both sequentially consistent, so that either the mover sees
// the count or the submitter sees the window closed (the store-load pattern of Dekker's
// algorithm). Nothing is shared between threads that submit at once, unless two of them hash to
// the same stripe. close() sums the stripes until all are zero.
//
// A thread must not close the window while it holds a Submission (it would wait for itself):
// a hook decides and carries out promotions before it enters its submission, never inside it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace vramspill::core {

class RemapWindow {
 public:
  // Held by a submission hook while it hands work to the driver.
  class Submission {
   public:
    Submission(Submission&& other) noexcept : stripe_(std::exchange(other.stripe_, nullptr)) {}
    Submission(const Submission&) = delete;
    Submission& operator=(const Submission&) = delete;
    Submission& operator=(Submission&&) = delete;
    ~Submission() {
      if (stripe_ != nullptr) stripe_->fetch_sub(1, std::memory_order_release);
    }

   private:
    friend class RemapWindow;
    explicit Submission(std::atomic<uint64_t>& stripe) noexcept : stripe_(&stripe) {}
    std::atomic<uint64_t>* stripe_;  // null once moved from
  };

  // The capability to remap: only close() makes one, and the window opens when it goes.
  class Exclusive {
   public:
    Exclusive(const Exclusive&) = delete;
    Exclusive& operator=(const Exclusive&) = delete;
    ~Exclusive() { window_.open(); }

   private:
    friend class RemapWindow;
    explicit Exclusive(RemapWindow& window) noexcept : window_(window) {}
    RemapWindow& window_;
  };

  constexpr RemapWindow() noexcept = default;
  RemapWindow(const RemapWindow&) = delete;
  RemapWindow& operator=(const RemapWindow&) = delete;

  // Waits while the window is closed, then counts the caller in.
  [[nodiscard]] Submission enter() noexcept;

  // Closes the window: waits for other closers, then for every Submission in flight to leave.
  [[nodiscard]] Exclusive close() noexcept;

  // Windows closed so far (for the statistics).
  uint64_t windows() const noexcept { return windows_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t kStripes = 64;
  struct alignas(64) Stripe {
    std::atomic<uint64_t> in_flight{0};
  };

  void open() noexcept;
  std::atomic<uint64_t>& my_stripe() noexcept;
  bool any_in_flight() const noexcept;

  std::array<Stripe, kStripes> stripes_{};
  alignas(64) std::atomic<bool> closed_{false};
  std::atomic<uint64_t> windows_{0};
};

}  // namespace vramspill::core
