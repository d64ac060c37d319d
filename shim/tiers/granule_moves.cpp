// GranuleArena's moves (Note [Moving a granule] in tiers/granule_arena.h): planned from the books,
// carried out by the mover (tiers/granule_mover.h), booked.
#include <algorithm>
#include <new>
#include <utility>

#include "tiers/granule_arena.h"

namespace vramspill::tiers {

template <typename Take>
void GranuleArena::walk_move(const std::vector<Granule>& granules, GranuleKind to, uint64_t count,
                             Take take) {
  const std::size_t size = granules.size();
  uint64_t left = count == 0 ? size : count;
  // Evictions take the block's last device granules, promotions its first host ones, a chunk
  // whole: evictions round up, promotions down (Note [Chunks]).
  for (std::size_t step = 0; step < size && left > 0;) {
    const std::size_t index = to == GranuleKind::kHost ? size - 1 - step : step;
    const Granule& granule = granules[index];
    const std::size_t first = index - granule.part;
    step += granule.span;
    if (granule.kind == to) continue;
    if (to == GranuleKind::kDevice && granule.span > left) break;
    for (std::size_t i = first; i < first + granule.span; ++i) take(i);
    left -= std::min<uint64_t>(left, granule.span);
  }
}

uint64_t GranuleArena::eviction_granules(CUdeviceptr base, uint64_t granules) const noexcept {
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(base);
  if (found == blocks_.end()) return 0;
  uint64_t moved = 0;
  walk_move(found->second.granules, GranuleKind::kHost, granules, [&](std::size_t) { ++moved; });
  return moved;
}

std::vector<Slot> GranuleArena::plan_locked(
    std::span<const GranuleMove> moves) const {
  std::vector<Slot> slots;
  for (const GranuleMove& move : moves) {
    const auto found = blocks_.find(move.base);
    if (found == blocks_.end() || !found->second.staged.empty()) continue;
    const std::vector<Granule>& granules = found->second.granules;
    // Note [Moves of dead contents]
    const bool dead = options_.dead != nullptr && options_.dead->dead(move.base);
    walk_move(granules, move.to, move.granules, [&](std::size_t index) {
      slots.push_back({.block = move.base,
                       .index = index,
                       .from = granules[index],
                       .to = {},
                       .dead = dead});
    });
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

MovePlan GranuleArena::plan(std::span<const GranuleMove> moves,
                              std::size_t fresh_per_slot) const {
  MovePlan planned;
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

MoveOutcome GranuleArena::move(std::span<const GranuleMove> moves,
                               const core::RemapWindow::Exclusive& /*window*/,
                               QueuedWork* queued) noexcept {
  return carry_out(moves, queued, CopyMode::kWait);
}

MoveOutcome GranuleArena::move_on_stream(std::span<const GranuleMove> moves,
                                         const core::RemapWindow::Exclusive& /*window*/,
                                         QueuedWork& queued) noexcept {
  return carry_out(moves, &queued, CopyMode::kKeepRunning);
}

MoveOutcome GranuleArena::evict_ahead(std::span<const GranuleMove> moves,
                                      const core::RemapWindow::Exclusive& /*window*/,
                                      QueuedWork* queued) noexcept {
  return carry_out(moves, queued, CopyMode::kAhead);
}

CUresult GranuleArena::settle(const core::RemapWindow::Exclusive& /*window*/) noexcept {
  const std::lock_guard move_lock(move_mutex_);
  end_of_batches_ahead();
  if (mover_.copies_pending() == 0) return CUDA_SUCCESS;
  const CUresult waited = ops_.wait_for_copies();
  // The window is closed: no submission is about to wait for an event given back here.
  if (waited == CUDA_SUCCESS) retire_copies(true, true);
  return waited;
}

void GranuleArena::end_batches_ahead(const core::RemapWindow::Exclusive& /*window*/) noexcept {
  const std::lock_guard move_lock(move_mutex_);
  end_of_batches_ahead();
}

void GranuleArena::end_of_batches_ahead() noexcept {
  batch_ahead_ = false;
  device_waited_ahead_ = false;
  mover_.drop_marks();
}

MoveOutcome GranuleArena::carry_out(std::span<const GranuleMove> moves, QueuedWork* queued,
                                    CopyMode mode) {
  MoveOutcome outcome;
  const std::lock_guard move_lock(move_mutex_);
  const GranuleMover::CallCounter counted(mover_);
  // Note [Evictions ahead of promotions]: only the batch right after one ahead, in the same
  // closed window, follows its marks; in the safe window the batch ahead waited for the device's
  // work, and no submission has been queued since.
  const bool after_ahead = std::exchange(batch_ahead_, mode == CopyMode::kAhead);
  const bool device_waited =
      std::exchange(device_waited_ahead_, false) && after_ahead && queued == nullptr;
  if (!after_ahead) mover_.drop_marks();
  retire_copies(false, true);
  MovePlan planned;
  try {
    settle_staged(moves, queued, outcome);  // Note [Staged promotions]
    if (mode != CopyMode::kWait) mover_.reserve_for_copies();  // Note [Moves copied on the stream]
    // Room for the new granules and, at the end, the old ones: pooling them allocates nothing.
    planned = plan(moves, 2);
  } catch (const std::bad_alloc&) {
    outcome.result = CUDA_ERROR_OUT_OF_MEMORY;
    return outcome;
  }
  if (planned.slots.empty()) return outcome;
  CUresult waited = CUDA_SUCCESS;
  if (queued != nullptr) {
    waited = queued->wait_for(planned.moving, ops_);
  } else if (!device_waited) {
    waited = ops_.synchronize_device();
    device_waited_ahead_ = waited == CUDA_SUCCESS && mode == CopyMode::kAhead;
  }
  if (waited != CUDA_SUCCESS) {
    outcome.result = waited;
    return outcome;
  }

  // Step 2: a destination for each slot; what the driver cannot give shrinks the batch.
  auto& [slots, fresh, moving] = planned;
  CUresult result = CUDA_SUCCESS;
  try {
    result = take_pieces(planned.wanted(), fresh, true);
  } catch (const std::bad_alloc&) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  planned.hand_out();  // what `fresh` keeps goes back to the pools
  if (const CUresult remapped = remap_dead(planned, outcome);
      result == CUDA_SUCCESS && remapped != CUDA_SUCCESS)
    result = remapped;
  // Both granules of a slot need homes: the copies go home to home (Note [Granule homes]).
  for (Granule Slot::*which : {&Slot::to, &Slot::from}) {
    if (const CUresult homed = mover_.give_homes(slots, which, fresh);
        result == CUDA_SUCCESS && homed != CUDA_SUCCESS)
      result = homed;
  }
  learn_homes(slots);
  GranuleMover::Copied copied;
  if (!slots.empty()) {
    // Copies left running need a record of their own, and every use of the blocks known to the
    // tracked window's submissions; a batch ahead in the safe window is waited for by settle().
    const bool copies_may_run =
        mode != CopyMode::kWait && mover_.room_for_copies() &&
        (queued != nullptr ? queued->names_every_use(moving) : mode == CopyMode::kAhead);
    CUresult failure = CUDA_SUCCESS;
    copied = mover_.copy_and_remap(slots, copies_may_run ? mode : CopyMode::kWait, failure);
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
  if (copied.in_flight && queued != nullptr) outcome.on_stream = copied.moved;
  pool(fresh);
  return outcome;
}

void GranuleArena::learn_homes(std::span<const Slot> slots) {
  const std::lock_guard lock(mutex_);
  for (const Slot& slot : slots) blocks_.at(slot.block).granules[slot.index].home = slot.from.home;
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

CUresult GranuleArena::remap_dead(MovePlan& plan, MoveOutcome& outcome) {
  auto& [slots, fresh, moving] = plan;
  // In order within each part: the rest stay sorted by block (Note [Moves copied on the stream]).
  const auto dead_end =
      std::stable_partition(slots.begin(), slots.end(), [](const Slot& slot) { return slot.dead; });
  const auto dead = static_cast<std::size_t>(dead_end - slots.begin());
  if (dead == 0) return CUDA_SUCCESS;
  // Note [Moves copied on the stream]: the new granules may be ones a copy in flight still uses,
  // and with no copy of their own on the arena's stream, nothing orders the program's next
  // writes after it: the copies are waited for first (move_mutex_ is held, the window closed).
  // A remap with no copy must also follow the work a stage took off the use tracker's books.
  const auto give_up = [&](CUresult waited) {
    for (std::size_t i = 0; i < dead; ++i) fresh.push_back(slots[i].to);
    slots.erase(slots.begin(), dead_end);
    return waited;
  };
  if (mover_.copies_pending() != 0) {
    if (const CUresult waited = ops_.wait_for_copies(); waited != CUDA_SUCCESS)
      return give_up(waited);
    retire_copies(true, true);
  }
  if (const CUresult followed = mover_.follow_staged_work(); followed != CUDA_SUCCESS)
    return give_up(followed);
  CUresult result = CUDA_SUCCESS;
  const std::span<const Slot> dead_slots(slots.data(), dead);
  book_moves(dead_slots, mover_.remap(dead_slots, result), fresh, outcome);
  slots.erase(slots.begin(), dead_end);
  return result;
}

void GranuleArena::forget_context() noexcept {
  const std::lock_guard move_lock(move_mutex_);
  mover_.forget_copies();
  ops_.forget_context();
  forget_unsettled();
}

void GranuleArena::retire_copies(bool all_done, bool window_closed) {
  mover_.retire_copies(all_done, window_closed);
  forget_unsettled();
}

CUresult GranuleArena::settle_copies() {
  if (mover_.copies_pending() == 0) return CUDA_SUCCESS;
  const std::lock_guard move_lock(move_mutex_);
  const CUresult settled = mover_.settle_copies();
  forget_unsettled();
  return settled;
}

void GranuleArena::forget_unsettled() {
  if (mover_.copies_pending() != 0) return;
  {
    const std::lock_guard lock(mutex_);
    pools_.settle();
  }
  finish_frees_under_copies();
}

void GranuleArena::finish_frees_under_copies() {
  std::map<CUdeviceptr, Block> freed;
  {
    const std::lock_guard lock(mutex_);
    freed.swap(freed_under_copies_);
  }
  for (auto& [base, block] : freed) {
    const uint64_t granules = block.granules.size();
    if (unmap_first(base, block.granules, granules)) {
      unreserve(base, granules);
    } else {
      const std::lock_guard lock(mutex_);
      ++leaked_ranges_;
    }
    pool(block.granules);
  }
}

CUresult GranuleArena::order_after_copies(uint64_t stream, std::span<const uint64_t> bases,
                                          bool everything, bool capturing) noexcept {
  return mover_.order_after_copies(stream, bases, everything, capturing);
}

}  // namespace vramspill::tiers
