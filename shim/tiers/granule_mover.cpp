#include "tiers/granule_mover.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <new>
#include <optional>
#include <utility>

namespace vramspill::tiers {

namespace {

// The slots from `first` that end at the first boundary of both sides' handles: a piece of the
// run that maps and unmaps whole (Note [Chunks]).
std::size_t piece_length(std::span<const Slot> slots, std::size_t first) {
  std::size_t past = first + 1;
  while (past < slots.size() && (slots[past].from.part != 0 || slots[past].to.part != 0)) ++past;
  return past - first;
}

// The handles that back `slots` (whole pieces) on side `which`, in order, into `mappings`.
std::size_t mappings_of(std::span<const Slot> slots, Granule Slot::*which,
                        std::span<Mapping> mappings) {
  std::size_t count = 0;
  for (const Slot& slot : slots) {
    const Granule& granule = slot.*which;
    if (granule.part == 0) mappings[count++] = {.handle = granule.handle, .granules = granule.span};
  }
  return count;
}

}  // namespace

CUresult GranuleMover::give_homes(std::vector<Slot>& slots, Granule Slot::*which,
                                  std::vector<Granule>& fresh) {
  CUresult first_error = CUDA_SUCCESS;
  std::size_t kept = 0;
  // Piece by piece: a chunk's first part settles the chunk's home, the others follow it, and a
  // piece that cannot have all its homes is dropped whole (Note [Chunks]).
  for (std::size_t first = 0; first < slots.size();) {
    const std::size_t length = piece_length(slots, first);
    bool homed = true;
    CUdeviceptr piece_home = 0;
    for (std::size_t i = first; i < first + length && homed; ++i) {
      Granule& granule = slots[i].*which;
      if (granule.part != 0) {
        if (granule.home == 0) granule.home = piece_home + granule.part * kGranuleBytes;
        continue;
      }
      if (granule.home == 0) {
        const CUresult result =
            homes_.settle({.handle = granule.handle, .granules = granule.span}, &granule.home);
        homed = result == CUDA_SUCCESS;
        if (!homed && first_error == CUDA_SUCCESS) first_error = result;
      }
      piece_home = granule.home;
    }
    for (std::size_t i = first; i < first + length; ++i) {
      if (homed) {
        slots[kept++] = slots[i];
      } else {
        fresh.push_back(slots[i].to);  // within the plan's room: one granule a slot at most
      }
    }
    first += length;
  }
  slots.resize(kept);
  return first_error;
}

bool GranuleMover::vacate(const Granule& piece) noexcept {
  return piece.home == 0 || homes_.vacate(piece.home, piece.span);
}

void GranuleMover::reserve_for_copies() {
  const std::lock_guard lock(mutex_);
  copies_in_flight_.reserve(kMaxCopiesInFlight);
  spent_events_.reserve(kMaxCopiesInFlight);
}

CUresult GranuleMover::settle_copies() {
  if (copies_pending() == 0) return CUDA_SUCCESS;
  const CUresult waited = ops_.wait_for_copies();
  if (waited == CUDA_SUCCESS) retire_copies(true, false);
  return waited;
}

GranuleMover::Copied GranuleMover::copy_and_remap(std::span<const Slot> slots, CopyMode mode,
                                                  CUresult& result) {
  if (const CUresult followed = follow_staged_work(); followed != CUDA_SUCCESS) {
    result = followed;
    return {.moved = 0, .in_flight = false, .copies_over = false};
  }
  CopyInFlight copy{.event = 0, .bases = {}};
  try {
    for (const Slot& slot : slots) {  // sorted by block
      if (copy.bases.empty() || copy.bases.back() != slot.block) copy.bases.push_back(slot.block);
    }
  } catch (const std::bad_alloc&) {
    mode = CopyMode::kWait;
  }
  // Note [Evictions ahead of promotions]: a batch ahead begins an epoch of its own.
  const bool after_marks = mode != CopyMode::kAhead && !marked_.empty() && !marks_lost_;
  const CUresult queued =
      copy_into_homes(slots, true, /*marking=*/mode == CopyMode::kAhead, after_marks);
  // Followed, or those of a batch ahead cut short, which are no order for the next batch: it
  // begins an epoch.
  if (after_marks || queued != CUDA_SUCCESS) drop_marks();
  if (queued != CUDA_SUCCESS) {
    // Nothing is remapped; the copies queued before the failure may still write new granules.
    result = queued;
    return {.moved = 0, .in_flight = false, .copies_over = ops_.wait_for_copies() == CUDA_SUCCESS};
  }
  // Home to home: the addresses may map the new granules at once, while the copies run.
  const std::size_t moved = remap(slots, result);
  const auto recorded = [&] {
    return mode == CopyMode::kAhead ? record_ahead(slots, &copy.event)
                                    : ops_.record_copies(&copy.event);
  };
  if (mode != CopyMode::kWait && recorded() == CUDA_SUCCESS) {
    // What submissions wait for: the blocks with a remapped granule (the slots are sorted).
    std::erase_if(copy.bases,
                  [&](uint64_t base) { return moved == 0 || base > slots[moved - 1].block; });
    const std::lock_guard lock(mutex_);
    copies_in_flight_.push_back(std::move(copy));  // within reserve_for_copies()'s room
    copies_pending_.store(copies_in_flight_.size(), std::memory_order_release);
    return {.moved = moved, .in_flight = true, .copies_over = true};
  }
  // In the window (or with no event to order submissions after): the host waits.
  drop_marks();
  const CUresult waited = ops_.wait_for_copies();
  if (waited != CUDA_SUCCESS && result == CUDA_SUCCESS) result = waited;
  return {.moved = moved, .in_flight = false, .copies_over = waited == CUDA_SUCCESS};
}

CUresult GranuleMover::record_ahead(std::span<const Slot> slots, uint64_t* event) {
  const bool all_evictions = std::ranges::all_of(
      slots, [](const Slot& slot) { return slot.to.kind == GranuleKind::kHost; });
  return all_evictions ? ops_.mark_copies(CopyLane::kToHost, event) : ops_.record_copies(event);
}

void GranuleMover::forget_copies() noexcept {
  for (std::vector<uint64_t>& marks : marks_) marks.clear();
  marked_.clear();
  marks_lost_ = false;
  {
    const std::lock_guard lock(mutex_);
    copies_in_flight_.clear();
    copies_pending_.store(0, std::memory_order_release);
  }
  spent_events_.clear();
  stage_waits_queued_ = false;
}

void GranuleMover::drop_marks() noexcept {
  for (std::vector<uint64_t>& marks : marks_) {
    for (const uint64_t mark : marks) ops_.drop_event(mark);
    marks.clear();
  }
  marked_.clear();
  marks_lost_ = false;
}

CUresult GranuleMover::follow_staged_work() {
  if (!stage_waits_queued_) return CUDA_SUCCESS;
  const CUresult waited = ops_.wait_for_copies();
  if (waited == CUDA_SUCCESS) stage_waits_queued_ = false;
  return waited;
}

CUresult GranuleMover::copy_into_homes(std::span<const Slot> slots, bool from_homes, bool marking,
                                       bool after_marks) {
  if (!after_marks) {
    drop_marks();  // a new epoch follows everything before it
    if (const CUresult begun = ops_.begin_copies(); begun != CUDA_SUCCESS) return begun;
  }
  const auto source = [&](const Slot& slot) { return from_homes ? slot.from.home : slot.address(); };
  // A run stays inside one reservation on each side: one block's range, one range of homes.
  const auto source_follows = [&](const Slot& slot, const Slot& previous) {
    return from_homes ? homes_.follows(slot.from.home, previous.from.home)
                      : slot.block == previous.block && slot.index == previous.index + 1;
  };
  // Evictions first, so that the to-host lane need not wait for the promotions (Note [Two copy
  // lanes] in tiers/granule_ops.h). The slots of one direction are consecutive in a run.
  std::vector<Slot> ordered;
  try {
    ordered.reserve(slots.size());
    for (const GranuleKind to : {GranuleKind::kHost, GranuleKind::kDevice}) {
      std::ranges::copy_if(slots, std::back_inserter(ordered),
                           [&](const Slot& slot) { return slot.to.kind == to; });
    }
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::size_t run_start = 0;
  for (std::size_t i = 1; i <= ordered.size(); ++i) {
    const bool run_goes_on = i < ordered.size() &&
                             ordered[i].to.kind == ordered[i - 1].to.kind &&
                             source_follows(ordered[i], ordered[i - 1]) &&
                             homes_.follows(ordered[i].to.home, ordered[i - 1].to.home);
    if (run_goes_on) continue;
    const std::span<const Slot> run(ordered.data() + run_start, i - run_start);
    const CopyLane lane =
        run.front().to.kind == GranuleKind::kHost ? CopyLane::kToHost : CopyLane::kToDevice;
    if (const CUresult result = copy_run(run, source(run.front()), lane, marking, after_marks);
        result != CUDA_SUCCESS)
      return result;
    run_start = i;
  }
  return CUDA_SUCCESS;
}

CUresult GranuleMover::copy_run(std::span<const Slot> run, CUdeviceptr source, CopyLane lane,
                                bool marking, bool after_marks) {
  const auto lane_index = static_cast<std::size_t>(lane);
  if (after_marks) {
    // The latest mark of the other lane among the handles the run touches.
    std::optional<std::size_t> latest;
    for (const Slot& slot : run) {
      for (const GranuleHandle handle : {slot.from.handle, slot.to.handle}) {
        const auto found = marked_.find(handle);
        if (found != marked_.end() && found->second.lane != lane &&
            (!latest || found->second.index > *latest))
          latest = found->second.index;
      }
    }
    if (latest) {
      const uint64_t mark = marks_.at(1 - lane_index).at(*latest);
      if (const CUresult followed = ops_.follow_mark(lane, mark); followed != CUDA_SUCCESS)
        return followed;
    }
  }
  if (const CUresult copied =
          ops_.copy(run.front().to.home, source, run.size() * kGranuleBytes, lane);
      copied != CUDA_SUCCESS)
    return copied;
  if (!marking || marks_lost_) return CUDA_SUCCESS;
  uint64_t mark = 0;
  if (ops_.mark_copies(lane, &mark) != CUDA_SUCCESS) {
    marks_lost_ = true;
    return CUDA_SUCCESS;
  }
  try {
    marks_.at(lane_index).push_back(mark);
    const Marked marked{.lane = lane, .index = marks_.at(lane_index).size() - 1};
    for (const Slot& slot : run) {
      marked_[slot.from.handle] = marked;
      marked_[slot.to.handle] = marked;
    }
  } catch (const std::bad_alloc&) {
    if (marks_.at(lane_index).empty() || marks_.at(lane_index).back() != mark) ops_.drop_event(mark);
    marks_lost_ = true;
  }
  return CUDA_SUCCESS;
}

std::size_t GranuleMover::remap(std::span<const Slot> slots, CUresult& result) {
  std::size_t moved = 0;
  // Run by run, each at most kRunGranules and whole pieces: a failure stops the batch with
  // everything before it moved.
  while (moved < slots.size()) {
    std::size_t end = moved + piece_length(slots, moved);
    while (end < slots.size() && slots[end].block == slots[moved].block &&
           slots[end].index == slots[end - 1].index + 1 &&
           end + piece_length(slots, end) - moved <= kRunGranules)
      end += piece_length(slots, end);
    const std::span<const Slot> run = slots.subspan(moved, end - moved);
    const CUdeviceptr address = run.front().address();
    if (ops_.unmap(address, run.size()) != CUDA_SUCCESS) {
      const std::size_t remapped = remap_one_by_one(run, result);
      moved += remapped;
      if (remapped < run.size()) return moved;
      continue;
    }
    std::array<Mapping, kRunGranules> to{};
    std::array<Mapping, kRunGranules> from{};
    const std::size_t to_count = mappings_of(run, &Slot::to, to);
    const std::size_t from_count = mappings_of(run, &Slot::from, from);
    if (result = ops_.map(address, std::span(to.data(), to_count)); result == CUDA_SUCCESS) {
      moved = end;
      continue;
    }
    // Nothing of the run is mapped (map() is all or nothing): the old handles go back.
    if (ops_.map(address, std::span(from.data(), from_count)) != CUDA_SUCCESS) {
      CUdeviceptr at = address;
      for (const Mapping& mapping : std::span(from.data(), from_count)) {
        if (ops_.map(at, std::span(&mapping, 1)) != CUDA_SUCCESS)  // a hole the block keeps
          unbacked_granules_.fetch_add(mapping.granules, std::memory_order_relaxed);
        at += mapping.granules * kGranuleBytes;
      }
    }
    return moved;
  }
  return moved;
}

std::size_t GranuleMover::remap_one_by_one(std::span<const Slot> run, CUresult& result) {
  for (std::size_t first = 0; first < run.size();) {
    const std::span<const Slot> piece = run.subspan(first, piece_length(run, first));
    std::array<Mapping, kRunGranules> to{};
    const std::size_t to_count = mappings_of(piece, &Slot::to, to);
    const CUdeviceptr address = piece.front().address();
    if (result = ops_.unmap(address, piece.size()); result != CUDA_SUCCESS) return first;
    if (result = ops_.map(address, std::span(to.data(), to_count)); result != CUDA_SUCCESS) {
      std::array<Mapping, kRunGranules> from{};
      const std::size_t from_count = mappings_of(piece, &Slot::from, from);
      if (ops_.map(address, std::span(from.data(), from_count)) != CUDA_SUCCESS)
        unbacked_granules_.fetch_add(piece.size(), std::memory_order_relaxed);
      return first;
    }
    first += piece.size();
  }
  return run.size();
}

void GranuleMover::retire_copies(bool all_done, bool window_closed) {
  if (window_closed) {
    for (const uint64_t event : spent_events_) ops_.drop_event(event);
    spent_events_.clear();
  }
  // Only the arena's move lock holder changes copies_in_flight_: it reads without the lock.
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
      spent_events_.push_back(retiring.at(i).event);  // within reserve_for_copies()'s room
    }
  }
}

bool GranuleMover::copying_into(CUdeviceptr base) const {
  const std::lock_guard lock(mutex_);
  return std::ranges::any_of(copies_in_flight_, [&](const CopyInFlight& copy) {
    return std::ranges::binary_search(copy.bases, base);
  });
}

CUresult GranuleMover::order_after_copies(uint64_t stream, std::span<const uint64_t> bases,
                                          bool everything, bool capturing) noexcept {
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
    const CUresult waited = ops_.order_stream_after(stream, events[i], capturing);
    if (result == CUDA_SUCCESS) result = waited;
  }
  return result;
}

}  // namespace vramspill::tiers
