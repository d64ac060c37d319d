// GranuleArena::move (Note [Moving a granule] in tiers/granule_arena.h).
#include <algorithm>
#include <iterator>
#include <new>
#include <optional>

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
  // take_granules() put the device granules first: hand them out from both ends.
  auto next_device = fresh.begin();
  auto past_host = fresh.end();
  std::erase_if(slots, [&](Slot& slot) {
    if (slot.from.kind == GranuleKind::kHost) {
      if (next_device == past_host || next_device->kind != GranuleKind::kDevice) return true;
      slot.to = *next_device++;
    } else {
      if (past_host == next_device || std::prev(past_host)->kind != GranuleKind::kHost) return true;
      slot.to = *--past_host;
    }
    return false;
  });
  // What is left between the two ends was not handed out.
  const auto handed_device = next_device - fresh.begin();
  fresh.erase(past_host, fresh.end());
  fresh.erase(fresh.begin(), fresh.begin() + handed_device);
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
  CUresult result = take_granules(slots.size(), to_device, fresh);
  hand_out(slots, fresh);  // what `fresh` keeps goes back to the pools
  if (const CUresult remapped = remap_dead(slots, fresh, outcome);
      result == CUDA_SUCCESS && remapped != CUDA_SUCCESS)
    result = remapped;
  CUdeviceptr staging = 0;
  std::size_t moved = 0;
  std::optional<StreamCopy> streamed;  // Note [Moves copied on the stream]
  if (!slots.empty() && on_stream && copies_pending_.load() < kMaxCopiesInFlight &&
      queued->names_every_use(moving)) {
    CUresult failure = CUDA_SUCCESS;
    streamed = copy_on_stream(slots, failure);
    if (result == CUDA_SUCCESS) result = failure;
    if (streamed) moved = streamed->moved;
    if (streamed && streamed->range_kept) slots.clear();  // leaked with the range
  }
  if (!slots.empty() && !streamed) {
    const CUresult reserved = ops_.reserve(slots.size() * kGranuleBytes, &staging);
    if (reserved == CUDA_SUCCESS) {
      CUresult failure = CUDA_SUCCESS;
      bool staging_clean = true;
      moved = copy_and_remap(staging, slots, failure, staging_clean);
      if (result == CUDA_SUCCESS) result = failure;
      if (staging_clean) {
        unreserve(staging, slots.size());
      } else {
        // A staging mapping stays: the range keeps it, and the new granules of the slots that
        // did not move may still be mapped there, so none of them is reused.
        const std::lock_guard lock(mutex_);
        ++leaked_ranges_;
        leaked_granules_ += slots.size() - moved;
        slots.resize(moved);
      }
    } else if (result == CUDA_SUCCESS) {
      result = reserved;
    }
  }
  if (outcome.result == CUDA_SUCCESS) outcome.result = result;

  // Step 5: the books, and the pools take the old granules and the unused new ones (a copy in
  // flight may still use them: Note [Moves copied on the stream]).
  book_moves(slots, moved, fresh, outcome);
  if (streamed && streamed->in_flight) outcome.on_stream = streamed->moved;
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

std::size_t GranuleArena::map_staging(CUdeviceptr staging, std::span<const Slot> slots,
                                      CUresult& result, Granule Slot::*which) {
  std::size_t staged = 0;
  for (; staged < slots.size(); ++staged) {
    result = ops_.map(staging + staged * kGranuleBytes, (slots[staged].*which).handle);
    if (result != CUDA_SUCCESS) break;
  }
  return staged;
}

std::size_t GranuleArena::remap(std::span<const Slot> slots, CUresult& result) {
  std::size_t moved = 0;
  // Granule by granule: a failure stops the batch with everything before it moved.
  for (; moved < slots.size(); ++moved) {
    const Slot& slot = slots[moved];
    const CUdeviceptr address = slot.block + slot.index * kGranuleBytes;
    if (result = ops_.unmap(address); result != CUDA_SUCCESS) break;
    if (result = ops_.map(address, slot.to.handle); result == CUDA_SUCCESS) continue;
    if (ops_.map(address, slot.from.handle) != CUDA_SUCCESS) {
      const std::lock_guard lock(mutex_);
      ++unbacked_granules_;  // neither backing maps again: a hole the block keeps
    }
    break;
  }
  return moved;
}

std::size_t GranuleArena::copy_and_remap(CUdeviceptr staging, std::vector<Slot>& slots,
                                         CUresult& result, bool& staging_clean) {
  const std::size_t staged = map_staging(staging, slots, result);
  std::size_t moved = 0;
  if (staged == slots.size()) {
    result = copy_runs(staging, slots);
    // Waited for even when a copy failed: the ones queued before it may still be running.
    const CUresult waited = ops_.wait_for_copies();
    if (waited != CUDA_SUCCESS) {
      // Copies may still run into the staging range: it stays mapped, and its granules are
      // lost with it rather than handed to another block under a running copy.
      if (result == CUDA_SUCCESS) result = waited;
      staging_clean = false;
      return 0;
    }
    if (result == CUDA_SUCCESS) moved = remap(slots, result);
  }
  for (std::size_t i = 0; i < staged; ++i)
    staging_clean = ops_.unmap(staging + i * kGranuleBytes) == CUDA_SUCCESS && staging_clean;
  return moved;
}

CUresult GranuleArena::copy_runs(CUdeviceptr staging, std::span<const Slot> slots) {
  std::size_t run_start = 0;
  for (std::size_t i = 1; i <= slots.size(); ++i) {
    const bool run_goes_on = i < slots.size() && slots[i].block == slots[i - 1].block &&
                             slots[i].index == slots[i - 1].index + 1;
    if (run_goes_on) continue;
    const Slot& first = slots[run_start];
    const CUresult result =
        ops_.copy(staging + run_start * kGranuleBytes, first.block + first.index * kGranuleBytes,
                  (i - run_start) * kGranuleBytes);
    if (result != CUDA_SUCCESS) return result;
    run_start = i;
  }
  return CUDA_SUCCESS;
}

}  // namespace vramspill::tiers
