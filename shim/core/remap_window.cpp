#include "core/remap_window.h"

#include <thread>

namespace vramspill::core {
namespace {

// Threads take stripes in turn, so that up to kStripes threads never share one.
std::atomic<std::size_t> next_stripe{0};

}  // namespace

std::atomic<uint64_t>& RemapWindow::my_stripe() noexcept {
  static thread_local const std::size_t index =
      next_stripe.fetch_add(1, std::memory_order_relaxed) % kStripes;
  return stripes_[index].in_flight;
}

RemapWindow::Submission RemapWindow::enter() noexcept {
  std::atomic<uint64_t>& stripe = my_stripe();
  for (;;) {
    // Note [Remap window]: count in, then look; the mover closes, then looks.
    stripe.fetch_add(1, std::memory_order_seq_cst);
    if (!closed_.load(std::memory_order_seq_cst)) return Submission(stripe);
    stripe.fetch_sub(1, std::memory_order_seq_cst);
    closed_.wait(true, std::memory_order_acquire);
  }
}

RemapWindow::Exclusive RemapWindow::close() noexcept {
  bool open_now = false;
  while (!closed_.compare_exchange_weak(open_now, true, std::memory_order_seq_cst)) {
    if (open_now) closed_.wait(true, std::memory_order_acquire);  // another mover holds it
    open_now = false;
  }
  windows_.fetch_add(1, std::memory_order_relaxed);
  // Submissions in flight are a driver call each: short, so a yield loop waits for them.
  while (any_in_flight()) std::this_thread::yield();
  return Exclusive(*this);
}

bool RemapWindow::any_in_flight() const noexcept {
  for (const Stripe& stripe : stripes_) {
    if (stripe.in_flight.load(std::memory_order_seq_cst) != 0) return true;
  }
  return false;
}

void RemapWindow::open() noexcept {
  closed_.store(false, std::memory_order_seq_cst);
  closed_.notify_all();
}

}  // namespace vramspill::core
