// GranuleArena::move (Note [Moving a granule] in tiers/granule_arena.h).
#include <algorithm>
#include <array>
#include <new>
#include <utility>

#include "tiers/granule_arena.h"

namespace vramspill::tiers {

std::vector<GranuleArena::Slot> GranuleArena::plan_locked(
    std::span<const GranuleMove> moves) const {
  std::vector<Slot> slots;
  for (const GranuleMove& move : moves) {
    const auto found = blocks_.find(move.base);
    if (found == blocks_.end() || !found->second.staged.empty()) continue;
    const std::vector<Granule>& granules = found->second.granules;
    const std::size_t count = granules.size();
    // Note [Moves of dead contents]
    const bool dead = options_.dead != nullptr && options_.dead->dead(move.base);
    uint64_t left = move.granules == 0 ? count : move.granules;
    // Evictions take the block's last device granules, promotions its first host ones.
    for (std::size_t step = 0; step < count && left > 0; ++step) {
      const std::size_t index = move.to == GranuleKind::kHost ? count - 1 - step : step;
      if (granules[index].kind == move.to) continue;
      slots.push_back({.block = move.base,
                       .index = index,
                       .from = granules[index],
                       .to = {},
                       .dead = dead});
      --left;
    }
  }
  // A block named twice moves each granule once: the first move that names it wins.
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    return a.block != b.block ? a.block < b.block : a.index < b.index;
  });
  slots.erase(std::unique(slots.begin(), slots.end(),
                          [](const Slot& a, const Slot& b) {
                            return a.block == b.block && a.index == b.index;
                          }),
              slots.end());
  return slots;
}

GranuleArena::Plan GranuleArena::plan(std::span<const GranuleMove> moves,
                                      std::size_t fresh_per_slot) const {
  Plan planned;
  {
    const std::lock_guard lock(mutex_);
    planned.slots = plan_locked(moves);
  }
  planned.fresh.reserve(fresh_per_slot * planned.slots.size());
  for (const Slot& slot : planned.slots) {  // sorted by block
    if (planned.moving.empty() || planned.moving.back() != slot.block)
      planned.moving.push_back(slot.block);
  }
  return planned;
}

void GranuleArena::hand_out(std::vector<Slot>& slots, std::vector<Granule>& fresh) {
  // take_granules() sorted them, device granules first and each kind by home: handed out in
  // that order, the homes of a run follow each other where they can.
  const auto first_host = std::ranges::find_if(
      fresh, [](const Granule& granule) { return granule.kind == GranuleKind::kHost; });
  auto next_device = fresh.begin();
  auto next_host = first_host;
  std::erase_if(slots, [&](Slot& slot) {
    if (slot.from.kind == GranuleKind::kHost) {
      if (next_device == first_host) return true;
      slot.to = *next_device++;
    } else {
      if (next_host == fresh.end()) return true;
      slot.to = *next_host++;
    }
    return false;
  });
  // What is left of each kind was not handed out.
  fresh.erase(first_host, next_host);
  fresh.erase(fresh.begin(), next_device);
}

MoveOutcome GranuleArena::move(std::span<const GranuleMove> moves,
                               const core::RemapWindow::Exclusive& /*window*/,
                               QueuedWork* queued) noexcept {
  return carry_out(moves, queued, false);
}

MoveOutcome GranuleArena::carry_out(std::span<const GranuleMove> moves, QueuedWork* queued,
                                    bool on_stream) {
  MoveOutcome outcome;
  const std::lock_guard move_lock(move_mutex_);
  const CallCounter counted(ops_, move_vmm_calls_);
  retire_copies(false, true);
  Plan planned;
  try {
    settle_staged(moves, queued, outcome);  // Note [Staged promotions]
    if (on_stream) {
      const std::lock_guard lock(mutex_);
      copies_in_flight_.reserve(kMaxCopiesInFlight);  // Note [Moves copied on the stream]
      spent_events_.reserve(kMaxCopiesInFlight);
    }
    // Room for the new granules and, at the end, the old ones: pooling them allocates nothing.
    planned = plan(moves, 2);
  } catch (const std::bad_alloc&) {
    outcome.result = CUDA_ERROR_OUT_OF_MEMORY;
    return outcome;
  }
  auto& [slots, fresh, moving] = planned;
  if (slots.empty()) return outcome;
  const CUresult waited =
      queued != nullptr ? queued->wait_for(moving, ops_) : ops_.synchronize_device();
  if (waited != CUDA_SUCCESS) {
    outcome.result = waited;
    return outcome;
  }

  // Step 2: a destination for each slot; what the driver cannot give shrinks the batch.
  const auto to_device =
      static_cast<uint64_t>(std::count_if(slots.begin(), slots.end(), [](const Slot& slot) {
        return slot.from.kind == GranuleKind::kHost;
      }));
  CUresult result = take_granules(slots.size(), to_device, fresh, true);
  hand_out(slots, fresh);  // what `fresh` keeps goes back to the pools
  if (const CUresult remapped = remap_dead(slots, fresh, outcome);
      result == CUDA_SUCCESS && remapped != CUDA_SUCCESS)
    result = remapped;
  // Both granules of a slot need homes: the copies go home to home (Note [Granule homes]).
  for (Granule Slot::*which : {&Slot::to, &Slot::from}) {
    if (const CUresult homed = give_homes(slots, which, fresh);
        result == CUDA_SUCCESS && homed != CUDA_SUCCESS)
      result = homed;
  }
  Copied copied;
  if (!slots.empty()) {
    const bool keep_running = on_stream && copies_pending_.load() < kMaxCopiesInFlight &&
                              queued->names_every_use(moving);
    CUresult failure = CUDA_SUCCESS;
    copied = copy_and_remap(slots, keep_running, failure);
    if (result == CUDA_SUCCESS) result = failure;
  }
  if (outcome.result == CUDA_SUCCESS) outcome.result = result;

  // Step 5: the books, and the pools take the old granules and the unused new ones (a copy in
  // flight may still use them: Note [Moves copied on the stream]).
  book_moves(slots, copied.moved, fresh, outcome);
  if (!copied.copies_over) {
    // A copy may still read or write them (the context is likely lost): they are the driver's
    // rather than handed to another block under it.
    const std::lock_guard lock(mutex_);
    leaked_granules_ += slots.size();
    fresh.resize(fresh.size() - slots.size());
  }
  if (copied.in_flight) outcome.on_stream = copied.moved;
  pool(fresh);
  return outcome;
}

void GranuleArena::book_moves(std::span<const Slot> slots, std::size_t moved,
                              std::vector<Granule>& fresh, MoveOutcome& outcome) {
  for (std::size_t i = 0; i < slots.size(); ++i)
    fresh.push_back(i < moved ? slots[i].from : slots[i].to);
  const std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < moved; ++i) {
    blocks_.at(slots[i].block).granules[slots[i].index] = slots[i].to;
    (slots[i].to.kind == GranuleKind::kDevice ? outcome.to_device : outcome.to_host) += 1;
  }
}

CUresult GranuleArena::remap_dead(std::vector<Slot>& slots, std::vector<Granule>& fresh,
                                  MoveOutcome& outcome) {
  // In order within each part: the rest stay sorted by block (Note [Moves copied on the stream]).
  const auto dead_end =
      std::stable_partition(slots.begin(), slots.end(), [](const Slot& slot) { return slot.dead; });
  const auto dead = static_cast<std::size_t>(dead_end - slots.begin());
  if (dead == 0) return CUDA_SUCCESS;
  // Note [Moves copied on the stream]: the new granules may be ones a copy in flight still uses,
  // and with no copy of their own on the arena's stream, nothing orders the program's next
  // writes after it: the copies are waited for first (move_mutex_ is held, the window closed).
  if (!copies_in_flight_.empty()) {
    if (const CUresult waited = ops_.wait_for_copies(); waited != CUDA_SUCCESS) {
      for (std::size_t i = 0; i < dead; ++i) fresh.push_back(slots[i].to);
      slots.erase(slots.begin(), dead_end);
      return waited;
    }
    retire_copies(true, true);
  }
  CUresult result = CUDA_SUCCESS;
  const std::span<const Slot> dead_slots(slots.data(), dead);
  book_moves(dead_slots, remap(dead_slots, result), fresh, outcome);
  slots.erase(slots.begin(), dead_end);
  return result;
}

CUresult GranuleArena::give_homes(std::vector<Slot>& slots, Granule Slot::*which,
                                  std::vector<Granule>& fresh) {
  CUresult first_error = CUDA_SUCCESS;
  std::erase_if(slots, [&](Slot& slot) {
    Granule& granule = slot.*which;
    if (granule.home != 0) return false;
    const CUresult result = homes_.settle(granule.handle, &granule.home);
    if (result == CUDA_SUCCESS) {
      if (which == &Slot::from) {  // a block holds it: its books keep the home
        const std::lock_guard lock(mutex_);
        blocks_.at(slot.block).granules[slot.index].home = granule.home;
      }
      return false;
    }
    if (first_error == CUDA_SUCCESS) first_error = result;
    fresh.push_back(slot.to);  // within plan()'s room: each slot gives back one granule at most
    return true;
  });
  return first_error;
}

GranuleArena::Copied GranuleArena::copy_and_remap(std::span<const Slot> slots, bool keep_running,
                                                  CUresult& result) {
  // Note [Moves copied on the stream]: the work a stage took the bits of is over once the arena's
  // stream is.
  if (keep_running && stage_waits_queued_) {
    keep_running = ops_.wait_for_copies() == CUDA_SUCCESS;
    stage_waits_queued_ = !keep_running;
  }
  CopyInFlight copy{.event = 0, .bases = {}};
  try {
    for (const Slot& slot : slots) {  // sorted by block
      if (copy.bases.empty() || copy.bases.back() != slot.block) copy.bases.push_back(slot.block);
    }
  } catch (const std::bad_alloc&) {
    keep_running = false;
  }
  if (const CUresult queued = copy_into_homes(slots, true); queued != CUDA_SUCCESS) {
    // Nothing is remapped; the copies queued before the failure may still write new granules.
    result = queued;
    return {.moved = 0, .in_flight = false, .copies_over = ops_.wait_for_copies() == CUDA_SUCCESS};
  }
  // Home to home: the addresses may map the new granules at once, while the copies run.
  const std::size_t moved = remap(slots, result);
  if (keep_running && ops_.record_copies(&copy.event) == CUDA_SUCCESS) {
    // What submissions wait for: the blocks with a remapped granule (the slots are sorted).
    std::erase_if(copy.bases,
                  [&](uint64_t base) { return moved == 0 || base > slots[moved - 1].block; });
    const std::lock_guard lock(mutex_);
    copies_in_flight_.push_back(std::move(copy));  // within the capacity carry_out() reserved
    copies_pending_.store(copies_in_flight_.size(), std::memory_order_release);
    return {.moved = moved, .in_flight = true, .copies_over = true};
  }
  // In the window (or with no event to order submissions after): the host waits.
  const CUresult waited = ops_.wait_for_copies();
  if (waited != CUDA_SUCCESS && result == CUDA_SUCCESS) result = waited;
  return {.moved = moved, .in_flight = false, .copies_over = waited == CUDA_SUCCESS};
}

CUresult GranuleArena::copy_into_homes(std::span<const Slot> slots, bool from_homes) {
  const auto source = [&](const Slot& slot) { return from_homes ? slot.from.home : slot.address(); };
  // A run stays inside one reservation on each side: one block's range, one range of homes.
  const auto source_follows = [&](const Slot& slot, const Slot& previous) {
    return from_homes ? homes_.follows(slot.from.home, previous.from.home)
                      : slot.block == previous.block && slot.index == previous.index + 1;
  };
  std::size_t run_start = 0;
  for (std::size_t i = 1; i <= slots.size(); ++i) {
    const bool run_goes_on = i < slots.size() && source_follows(slots[i], slots[i - 1]) &&
                             homes_.follows(slots[i].to.home, slots[i - 1].to.home);
    if (run_goes_on) continue;
    const Slot& first = slots[run_start];
    const CUresult result =
        ops_.copy(first.to.home, source(first), (i - run_start) * kGranuleBytes);
    if (result != CUDA_SUCCESS) return result;
    run_start = i;
  }
  return CUDA_SUCCESS;
}

std::size_t GranuleArena::remap(std::span<const Slot> slots, CUresult& result) {
  std::size_t moved = 0;
  // Run by run, each at most kRunGranules: a failure stops the batch with everything before it
  // moved.
  while (moved < slots.size()) {
    std::size_t end = moved + 1;
    while (end < slots.size() && end - moved < kRunGranules &&
           slots[end].block == slots[moved].block &&
           slots[end].index == slots[end - 1].index + 1)
      ++end;
    const std::span<const Slot> run = slots.subspan(moved, end - moved);
    const CUdeviceptr address = run.front().address();
    if (ops_.unmap(address, run.size()) != CUDA_SUCCESS) {
      const std::size_t remapped = remap_one_by_one(run, result);
      moved += remapped;
      if (remapped < run.size()) return moved;
      continue;
    }
    std::array<GranuleHandle, kRunGranules> to{};
    std::array<GranuleHandle, kRunGranules> from{};
    for (std::size_t i = 0; i < run.size(); ++i) {
      to.at(i) = run[i].to.handle;
      from.at(i) = run[i].from.handle;
    }
    if (result = ops_.map(address, std::span(to.data(), run.size())); result == CUDA_SUCCESS) {
      moved = end;
      continue;
    }
    // Nothing of the run is mapped (map() is all or nothing): the old granules go back.
    if (ops_.map(address, std::span(from.data(), run.size())) != CUDA_SUCCESS) {
      for (std::size_t i = 0; i < run.size(); ++i) {
        if (ops_.map(run[i].address(), std::span(&from.at(i), 1)) == CUDA_SUCCESS) continue;
        const std::lock_guard lock(mutex_);
        ++unbacked_granules_;  // neither backing maps again: a hole the block keeps
      }
    }
    return moved;
  }
  return moved;
}

std::size_t GranuleArena::remap_one_by_one(std::span<const Slot> run, CUresult& result) {
  for (std::size_t i = 0; i < run.size(); ++i) {
    const Slot& slot = run[i];
    if (result = ops_.unmap(slot.address(), 1); result != CUDA_SUCCESS) return i;
    if (result = ops_.map(slot.address(), std::span(&slot.to.handle, 1)); result == CUDA_SUCCESS)
      continue;
    if (ops_.map(slot.address(), std::span(&slot.from.handle, 1)) != CUDA_SUCCESS) {
      const std::lock_guard lock(mutex_);
      ++unbacked_granules_;
    }
    return i;
  }
  return run.size();
}

}  // namespace vramspill::tiers
