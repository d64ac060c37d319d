// Moves copied on the stream (Note [Moves copied on the stream] in tiers/granule_arena.h).
#include <algorithm>
#include <array>
#include <new>
#include <optional>
#include <utility>

#include "tiers/granule_arena.h"

namespace vramspill::tiers {

MoveOutcome GranuleArena::move_on_stream(std::span<const GranuleMove> moves,
                                         const core::RemapWindow::Exclusive& /*window*/,
                                         QueuedWork& queued) noexcept {
  return carry_out(moves, &queued, true);
}

void GranuleArena::retire_copies(bool all_done, bool window_closed) {
  if (window_closed) {
    for (const uint64_t event : spent_events_) ops_.drop_event(event);
    spent_events_.clear();
  }
  // Only the thread that holds move_mutex_ changes copies_in_flight_: it reads without the lock.
  std::array<bool, kMaxCopiesInFlight> done{};
  bool any_done = false;
  for (std::size_t i = 0; i < copies_in_flight_.size(); ++i) {
    done.at(i) = all_done || ops_.copies_done(copies_in_flight_[i].event);
    any_done = any_done || done.at(i);
  }
  if (!any_done) return;
  std::array<CopyInFlight, kMaxCopiesInFlight> retiring;
  std::size_t count = 0;
  {
    const std::lock_guard lock(mutex_);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < copies_in_flight_.size(); ++i) {
      if (done.at(i)) {
        retiring.at(count++) = std::move(copies_in_flight_[i]);
      } else {
        if (kept != i) copies_in_flight_[kept] = std::move(copies_in_flight_[i]);
        ++kept;
      }
    }
    copies_in_flight_.resize(kept);
    copies_pending_.store(kept, std::memory_order_release);
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (window_closed) {
      ops_.drop_event(retiring.at(i).event);
    } else {
      spent_events_.push_back(retiring.at(i).event);  // within the capacity carry_out() reserved
    }
  }
  const std::lock_guard lock(mutex_);
  if (copies_in_flight_.empty()) unsettled_ = {};
}

CUresult GranuleArena::settle_copies() {
  if (copies_pending_.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  const std::lock_guard move_lock(move_mutex_);
  if (copies_in_flight_.empty()) return CUDA_SUCCESS;
  const CUresult waited = ops_.wait_for_copies();
  if (waited == CUDA_SUCCESS) retire_copies(true, false);
  return waited;
}

bool GranuleArena::copying_into(CUdeviceptr base) const {
  return std::ranges::any_of(copies_in_flight_, [&](const CopyInFlight& copy) {
    return std::ranges::binary_search(copy.bases, base);
  });
}

CUresult GranuleArena::order_after_copies(uint64_t stream, std::span<const uint64_t> bases,
                                          bool everything, bool on_host) noexcept {
  if (copies_pending_.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  std::array<uint64_t, kMaxCopiesInFlight> events{};
  std::size_t count = 0;
  {
    const std::lock_guard lock(mutex_);
    for (const CopyInFlight& copy : copies_in_flight_) {
      const bool touched = everything || std::ranges::any_of(bases, [&](uint64_t base) {
                             return std::ranges::binary_search(copy.bases, base);
                           });
      if (touched && count < events.size()) events[count++] = copy.event;
    }
  }
  // The window is held: no copy retires in a closed window, and no event is destroyed, before
  // the waits.
  CUresult result = CUDA_SUCCESS;
  for (std::size_t i = 0; i < count; ++i) {
    const CUresult waited = ops_.order_stream_after(stream, events[i], on_host);
    if (result == CUDA_SUCCESS) result = waited;
  }
  return result;
}

}  // namespace vramspill::tiers
