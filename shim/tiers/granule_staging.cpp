// Staged promotions of the granule arena (Note [Staged promotions] in tiers/granule_arena.h).
#include <algorithm>
#include <iterator>
#include <new>

#include "tiers/granule_arena.h"

namespace vramspill::tiers {

MoveOutcome GranuleArena::stage(std::span<const GranuleMove> moves,
                                const core::RemapWindow::Exclusive& /*window*/,
                                QueuedWork& queued) noexcept {
  MoveOutcome outcome;
  const std::lock_guard move_lock(move_mutex_);
  const GranuleMover::CallCounter counted(mover_);
  end_of_batches_ahead();  // its copies begin an epoch of their own
  retire_copies(false, true);  // Note [Moves copied on the stream]
  MovePlan planned;
  try {
    std::vector<GranuleMove> promotions;
    std::ranges::copy_if(moves, std::back_inserter(promotions),
                         [](const GranuleMove& move) { return move.to == GranuleKind::kDevice; });
    planned = plan(promotions, 1);
  } catch (const std::bad_alloc&) {
    outcome.result = CUDA_ERROR_OUT_OF_MEMORY;
    return outcome;
  }
  auto& [slots, fresh, moving] = planned;
  if (slots.empty()) return outcome;
  // Taken before the arena's stream is ordered after the program's work: taking may wait on the
  // host for that stream (pooled handles of the other size a copy in flight may still use),
  // which must not wait for the program's kernels in the window.
  try {
    outcome.result = take_pieces(planned.wanted(), fresh, true);
  } catch (const std::bad_alloc&) {
    outcome.result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  uint64_t since = 0;
  // Note [Moves copied on the stream]: whatever it took, only the arena's stream waits for.
  mover_.stage_took_queued_work();
  if (const CUresult ordered = queued.order_after(moving, ops_, since); ordered != CUDA_SUCCESS) {
    pool(fresh);  // nothing staged: what was taken goes back
    outcome.result = ordered;
    return outcome;
  }
  planned.hand_out();
  if (const CUresult homed = mover_.give_homes(slots, &Slot::to, fresh);
      outcome.result == CUDA_SUCCESS)
    outcome.result = homed;
  pool(fresh);  // what the slots did not take (nothing, unless the driver failed)
  for (auto first = slots.begin(); first != slots.end();) {
    const auto past = std::find_if(first, slots.end(),
                                   [&](const Slot& slot) { return slot.block != first->block; });
    CUresult result = CUDA_SUCCESS;
    if (stage_block(std::span(first, past), since, result)) {
      outcome.to_device += static_cast<uint64_t>(past - first);
    } else if (outcome.result == CUDA_SUCCESS) {
      outcome.result = result;
    }
    first = past;
  }
  return outcome;
}

bool GranuleArena::stage_block(std::span<const Slot> slots, uint64_t since, CUresult& result) {
  if (result = mover_.copy_into_homes(slots, false); result == CUDA_SUCCESS) {
    try {
      const std::lock_guard lock(mutex_);
      Block& block = blocks_.at(slots.front().block);
      block.staged.assign(slots.begin(), slots.end());
      staged_blocks_.fetch_add(1, std::memory_order_relaxed);
      block.staged_since = since;
      for (const Slot& slot : slots) block.granules[slot.index] = slot.to;
      return true;
    } catch (const std::bad_alloc&) {
      result = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  // Undone: a copy queued into the homes may still run.
  if (copies_over_for(slots)) {
    for (const Slot& slot : slots) pool_one(slot.to);
  }
  return false;
}

bool GranuleArena::copies_over_for(std::span<const Slot> slots) {
  if (ops_.wait_for_copies() == CUDA_SUCCESS) return true;
  const std::lock_guard lock(mutex_);
  leaked_granules_ += slots.size();
  return false;
}

MoveOutcome GranuleArena::finish_staged(std::span<const GranuleMove> moves,
                                        const core::RemapWindow::Exclusive& /*window*/,
                                        QueuedWork* queued) noexcept {
  MoveOutcome outcome;
  const std::lock_guard move_lock(move_mutex_);
  const GranuleMover::CallCounter counted(mover_);
  try {
    settle_staged(moves, queued, outcome);
  } catch (const std::bad_alloc&) {
    outcome.result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  return outcome;
}

void GranuleArena::settle_staged(std::span<const GranuleMove> moves, QueuedWork* queued,
                                 MoveOutcome& outcome) {
  std::vector<uint64_t> finishing;  // bases, as QueuedWork takes them
  std::vector<uint64_t> unstaging;
  {
    const std::lock_guard lock(mutex_);
    for (const GranuleMove& move : moves) {
      const auto found = blocks_.find(move.base);
      if (found == blocks_.end() || found->second.staged.empty()) continue;
      std::vector<uint64_t>& settling = move.to == GranuleKind::kDevice ? finishing : unstaging;
      if (std::ranges::find(settling, move.base) == settling.end()) settling.push_back(move.base);
    }
  }
  for (const uint64_t base : unstaging) {
    if (std::ranges::find(finishing, base) == finishing.end()) outcome.to_host += unstage(base).granules;
  }
  if (!finishing.empty()) finish(finishing, queued, outcome);
}

void GranuleArena::finish(std::span<const uint64_t> bases, QueuedWork* queued,
                          MoveOutcome& outcome) {
  std::vector<std::vector<Slot>> staged;
  std::vector<uint64_t> since;
  {
    const std::lock_guard lock(mutex_);
    for (const uint64_t base : bases) {
      const Block& block = blocks_.at(base);
      staged.push_back(block.staged);
      since.push_back(block.staged_since);
    }
  }
  CUresult result = queued != nullptr ? queued->wait_for(bases, ops_) : ops_.synchronize_device();
  // Work queued on a block since its stage may have written its host granules after the copy
  // (without a QueuedWork to say, the copy is made again).
  for (std::size_t i = 0; result == CUDA_SUCCESS && i < staged.size(); ++i) {
    if (queued == nullptr || queued->queued_since(bases[i], since[i]))
      result = mover_.copy_into_homes(staged[i], false);
  }
  if (const CUresult waited = ops_.wait_for_copies(); result == CUDA_SUCCESS) result = waited;
  if (result != CUDA_SUCCESS) {
    // Nothing is remapped: the launch reaches the blocks in place, as if never promoted.
    for (const uint64_t base : bases) outcome.to_host += unstage(base).granules;
    if (outcome.result == CUDA_SUCCESS) outcome.result = result;
    return;
  }
  for (std::size_t i = 0; i < staged.size(); ++i) {
    const std::vector<Slot>& slots = staged[i];
    const std::size_t moved = mover_.remap(slots, result);
    {
      const std::lock_guard lock(mutex_);
      Block& block = blocks_.at(bases[i]);
      block.staged.clear();
      staged_blocks_.fetch_sub(1, std::memory_order_relaxed);
      // The slots that did not move keep their old granules.
      for (std::size_t j = moved; j < slots.size(); ++j) {
        block.granules[slots[j].index] = slots[j].from;
        ++outcome.to_host;
      }
    }
    for (std::size_t j = 0; j < slots.size(); ++j) pool_one(j < moved ? slots[j].from : slots[j].to);
    if (result != CUDA_SUCCESS && outcome.result == CUDA_SUCCESS) outcome.result = result;
    result = CUDA_SUCCESS;
  }
}

GranuleArena::Unstaged GranuleArena::unstage(CUdeviceptr base) {
  std::vector<Slot> slots;
  {
    const std::lock_guard lock(mutex_);
    Block& block = blocks_.at(base);
    slots.swap(block.staged);
    if (!slots.empty()) staged_blocks_.fetch_sub(1, std::memory_order_relaxed);
    for (const Slot& slot : slots) block.granules[slot.index] = slot.from;
  }
  // The staged copy may still write the new granules.
  const bool copies_over = copies_over_for(slots);
  if (copies_over) {
    for (const Slot& slot : slots) pool_one(slot.to);
  }
  return {.granules = slots.size(), .copies_over = copies_over};
}

}  // namespace vramspill::tiers
