// Promotions that arrive on the stream (Note [Promotions that arrive on the stream] in
// tiers/granule_arena.h).
#include <algorithm>
#include <array>
#include <new>
#include <optional>
#include <utility>

#include "tiers/granule_arena.h"

namespace vramspill::tiers {

MoveOutcome GranuleArena::arrive(std::span<const GranuleMove> moves,
                                 const core::RemapWindow::Exclusive& /*window*/,
                                 QueuedWork& queued) noexcept {
  try {
    return carry_out(promotions_among(moves), &queued, true);
  } catch (const std::bad_alloc&) {
    return {.result = CUDA_ERROR_OUT_OF_MEMORY};
  }
}

std::optional<std::size_t> GranuleArena::arrive_on_stream(std::span<const Slot> slots,
                                                          CUresult& result, bool& in_flight) {
  in_flight = false;
  Arrival arrival{.event = 0, .range = 0, .slots = slots.size(), .bases = {}, .held = {}};
  try {
    arrival.held.reserve(slots.size());
    for (const Slot& slot : slots) {  // sorted by block
      if (arrival.bases.empty() || arrival.bases.back() != slot.block)
        arrival.bases.push_back(slot.block);
    }
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  const uint64_t granules = 2 * slots.size();
  if (ops_.reserve(granules * kGranuleBytes, &arrival.range) != CUDA_SUCCESS) return std::nullopt;
  const CUdeviceptr source = arrival.range;
  const CUdeviceptr destination = arrival.range + slots.size() * kGranuleBytes;
  CUresult failure = CUDA_SUCCESS;
  std::size_t mapped = map_staging(source, slots, failure, &Slot::from);
  if (mapped == slots.size()) mapped += map_staging(destination, slots, failure);
  if (mapped == granules) failure = ops_.copy(destination, source, slots.size() * kGranuleBytes);
  if (mapped < granules || failure != CUDA_SUCCESS) {
    // Nothing was queued: the window's copy does it all.
    if (!release_staging(arrival.range, mapped, granules)) {
      const std::lock_guard lock(mutex_);
      leaked_granules_ += slots.size();  // the new ones, still mapped in the kept range
      result = failure;
      return 0;
    }
    return std::nullopt;
  }
  // The addresses may map the device granules at once: the copy writes them through the range.
  const std::size_t moved = remap(slots, result);
  for (std::size_t i = 0; i < slots.size(); ++i)
    arrival.held.push_back(i < moved ? slots[i].from : slots[i].to);
  // What submissions wait for: the blocks the copy wrote a remapped granule of (slots are sorted).
  std::erase_if(arrival.bases,
                [&](uint64_t base) { return moved == 0 || base > slots[moved - 1].block; });
  if (ops_.record_copies(&arrival.event) != CUDA_SUCCESS) {
    // No event to order submissions after: the host waits for the copy here.
    if (const CUresult waited = ops_.wait_for_copies(); waited != CUDA_SUCCESS) {
      const std::lock_guard lock(mutex_);
      ++leaked_ranges_;
      leaked_granules_ += slots.size();
      if (result == CUDA_SUCCESS) result = waited;
      return moved;
    }
    retire(arrival);
    return moved;
  }
  in_flight = true;
  const std::lock_guard lock(mutex_);
  arrivals_.push_back(std::move(arrival));  // within the capacity carry_out() reserved
  arrivals_in_flight_.store(arrivals_.size(), std::memory_order_release);
  return moved;
}

void GranuleArena::retire_arrivals(bool all_done, bool window_closed) {
  if (window_closed) {
    for (const uint64_t event : spent_events_) ops_.drop_event(event);
    spent_events_.clear();
  }
  // Only the thread that holds move_mutex_ changes arrivals_: it reads them without the lock.
  std::array<bool, kMaxArrivals> done{};
  bool any_done = false;
  for (std::size_t i = 0; i < arrivals_.size(); ++i) {
    done.at(i) = all_done || ops_.copies_done(arrivals_[i].event);
    any_done = any_done || done.at(i);
  }
  if (!any_done) return;
  std::array<Arrival, kMaxArrivals> retiring;
  std::size_t count = 0;
  {
    const std::lock_guard lock(mutex_);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < arrivals_.size(); ++i) {
      if (done.at(i)) {
        retiring.at(count++) = std::move(arrivals_[i]);
      } else {
        if (kept != i) arrivals_[kept] = std::move(arrivals_[i]);
        ++kept;
      }
    }
    arrivals_.resize(kept);
    arrivals_in_flight_.store(kept, std::memory_order_release);
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (window_closed) {
      ops_.drop_event(retiring.at(i).event);
    } else {
      spent_events_.push_back(retiring.at(i).event);  // within the capacity carry_out() reserved
    }
    retire(retiring.at(i));
  }
}

void GranuleArena::retire(Arrival& arrival) {
  if (release_staging(arrival.range, 2 * arrival.slots, 2 * arrival.slots)) {
    for (const Granule& granule : arrival.held) pool_one(granule);
  } else {
    const std::lock_guard lock(mutex_);
    leaked_granules_ += arrival.held.size();
  }
}

bool GranuleArena::arriving(CUdeviceptr base) const {
  return std::ranges::any_of(arrivals_, [&](const Arrival& arrival) {
    return std::ranges::binary_search(arrival.bases, base);
  });
}

CUresult GranuleArena::order_after_arrivals(uint64_t stream, std::span<const uint64_t> bases,
                                            bool everything, bool on_host) noexcept {
  if (arrivals_in_flight_.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  std::array<uint64_t, kMaxArrivals> events{};
  std::size_t count = 0;
  {
    const std::lock_guard lock(mutex_);
    for (const Arrival& arrival : arrivals_) {
      const bool touched = everything || std::ranges::any_of(bases, [&](uint64_t base) {
                             return std::ranges::binary_search(arrival.bases, base);
                           });
      if (touched && count < events.size()) events[count++] = arrival.event;
    }
  }
  // The window is held: no arrival retires, and no event is destroyed, before the waits.
  CUresult result = CUDA_SUCCESS;
  for (std::size_t i = 0; i < count; ++i) {
    const CUresult waited = ops_.order_stream_after(stream, events[i], on_host);
    if (result == CUDA_SUCCESS) result = waited;
  }
  return result;
}

}  // namespace vramspill::tiers
