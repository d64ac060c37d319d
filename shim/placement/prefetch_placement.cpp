#include "placement/prefetch_placement.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <utility>
#include <vector>

#include "placement/rule_victims.h"
#include "telemetry/log.h"
#include "tiers/granule_ops.h"

namespace vramspill::placement {
namespace {

using policies::BlockId;
using tiers::kGranuleBytes;

uint64_t whole_pages(uint64_t bytes) {
  return (bytes + kGranuleBytes - 1) / kGranuleBytes * kGranuleBytes;
}

// The policy's stream id: the CUstream's value folded to 32 bits, as for the remap mover.
uint32_t policy_stream(uint64_t stream) { return static_cast<uint32_t>(stream ^ (stream >> 32)); }

}  // namespace

PrefetchPlacement::PrefetchPlacement(TieredBudgets& budgets, PrefetchDevices& devices,
                                     const TieredOptions& options) noexcept
    : budgets_(budgets), devices_(devices), options_(options), error_(policy_error(options)) {}

PrefetchPlacement::Device* PrefetchPlacement::device_state_locked(int device) noexcept {
  if (!error_.empty() || device < 0 || static_cast<std::size_t>(device) >= kDevices) return nullptr;
  Device& state = device_states_[static_cast<std::size_t>(device)];
  if (state.policy != nullptr) return &state;
  try {
    tiers::PrefetchOps* ops = devices_.ops(device);
    if (ops == nullptr) return nullptr;
    std::unique_ptr<policies::EvictionPolicy> policy =
        make_device_policy(options_, budgets_.device_room(device));
    if (policy == nullptr) return nullptr;
    state.ops = ops;
    state.policy = std::move(policy);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  return &state;
}

void PrefetchPlacement::tell_policy_of_capacity_locked(int device, Device& state) noexcept {
  // Note [A free waits outside the lock]: a leaving block's pages are not the policy's.
  state.policy->set_capacity(
      (state.on_device_bytes - state.leaving_bytes + budgets_.device_room(device)) /
      kGranuleBytes);
}

void PrefetchPlacement::forget_promotions_done_locked(Device& state) noexcept {
  if (state.queued_in != 0 && state.ops->promotions_done()) state.queued_in = 0;
}

bool PrefetchPlacement::card_takes_locked(Device& state, uint64_t bytes, uint64_t leaving,
                                          bool after_evictions) noexcept {
  const std::optional<uint64_t> free = state.ops->device_free();
  // A driver that does not say leaves the budget as the only limit.
  if (!free) return true;
  // Note [The prefetch mover]: of the bytes the books have on the device, at most these are not
  // there yet, and so not yet out of the driver's free figure. A promotion that does not wait
  // for the evictions queued (Note [Two lanes]) gets no room from them. Known limit: it may also
  // land beside a block promoted and then evicted before that promotion ran, which the books no
  // longer have on the device; counting every promotion queued instead (queued_in, reset only
  // when the lane is seen idle, which under steady pressure it never is) refused most of them:
  // learned on training at 3x went from 0.35x managed mode's modeled step to 0.48x. Tracking
  // each promotion's end is what would make this exact. An overfull card costs the driver's own
  // evictions of managed pages, never a wrong byte.
  const uint64_t not_yet_in = std::min(state.queued_in, state.on_device_bytes);
  return bytes + not_yet_in <= *free + (after_evictions ? leaving : 0);
}

void PrefetchPlacement::note_use(Block& block, uint64_t stream) noexcept {
  const auto used = block.last_streams.begin();
  const auto end = used + static_cast<std::ptrdiff_t>(block.streams);
  if (std::find(used, end, stream) != end) return;
  if (block.streams == kLastStreams) {
    std::shift_left(block.last_streams.begin(), block.last_streams.end(), 1);
    block.last_streams.back() = stream;
    return;
  }
  block.last_streams[block.streams++] = stream;
}

bool PrefetchPlacement::evict_locked(BlockId id, Block& block, uint64_t out) noexcept {
  Device& state = device_states_[static_cast<std::size_t>(block.device)];
  // Its last pages on the device go (Note [Evicting part of a block] in
  // policies/eviction_policy.h); the last page of a block whose size is not whole pages is short.
  const uint64_t from = block.device_bytes - out;
  const uint64_t to = std::min(block.device_bytes, block.size);
  if (const CUresult result = state.ops->prefetch(
          id, from, to - from, /*to_device=*/false,
          std::span(block.last_streams.data(), block.streams), /*after_evictions=*/false);
      result != CUDA_SUCCESS) {
    // Not queued: the pages are still on the device, as the books say.
    ++stats_.failed_prefetches;
    logging::warn("tiered (prefetch): evicting {} bytes of a block failed (CUresult {}); they "
                  "stay on device {}",
                  out, static_cast<int>(result), block.device);
    return false;
  }
  block.device_bytes = from;
  // What stays may still be on its way in (Note [Launches after a promotion]).
  block.arriving = block.arriving && from != 0;
  block.streams = 0;
  if (core::MemoryEvents* const told = events_.load(std::memory_order_acquire))
    told->evicted(block.device, id, out);
  budgets_.give_device(block.device, out);
  state.on_device_bytes -= out;
  tell_moved_locked(state, id, from);
  ++stats_.evictions;
  stats_.evicted_bytes += out;
  if (from != 0) ++stats_.evicted_in_part;
  return true;
}

bool PrefetchPlacement::make_room_locked(int device, Device& state, uint64_t bytes,
                                         std::span<const BlockId> keep,
                                         std::optional<BlockId> promoting) {
  // Room for another allocation is the budget's alone: the driver places it.
  const auto card_takes = [&](uint64_t leaving) {
    // Where the card cannot take it beside them, the promotion waits for the evictions.
    return !promoting || card_takes_locked(state, bytes, leaving, /*after_evictions=*/true);
  };
  uint64_t room = budgets_.device_room(device);
  // The ledger's room, not a sum: a device held over its budget gets less than it freed.
  if (room < bytes && free_dead_locked(device, bytes - room, keep, promoting) != 0)
    room = budgets_.device_room(device);
  if (room >= bytes) return card_takes(0);
  const uint64_t short_by = (bytes - room + kGranuleBytes - 1) / kGranuleBytes;
  // Note [Rules before the policy] in placement/tiered_placement.h
  const RuledVictims ruled =
      victims_by_rule(state.ruled, keep, short_by, [&](BlockId id) -> uint64_t {
        const auto found = blocks_.find(id);
        return found != blocks_.end() ? found->second.device_bytes / kGranuleBytes : 0;
      });
  std::vector<BlockId> victims = ruled.first;
  bool in_part = false;
  if (ruled.covered < short_by) {
    // A prefetch moves any of a block's pages: the last victim may give up only some.
    const policies::Victims chosen =
        state.policy->choose_victims(short_by - ruled.covered, ruled.keep, /*in_part=*/true);
    if (!chosen.enough) return false;
    victims.insert(victims.end(), chosen.blocks.begin(), chosen.blocks.end());
    in_part = chosen.partial_last;
  }
  // The victims that will leave, and what of each: their pages on the device until the room is
  // made, with `in_part` only the pages the room still needs of the last.
  std::vector<PromotionAdmission::Victim> leaving;
  uint64_t made = room;
  for (const BlockId victim : victims) {
    if (made >= bytes) break;
    const auto found = blocks_.find(victim);
    if (found == blocks_.end() || found->second.device_bytes == 0) continue;
    const uint64_t held = found->second.device_bytes;
    const uint64_t out = in_part ? std::min(held, whole_pages(bytes - made)) : held;
    leaving.push_back({victim, out});
    made += out;
  }
  if (made < bytes) return false;
  // Note [Admitting a promotion]: learned, locked, has weighed its victims already, and a pinned
  // block comes in whatever it displaces (Note [Rules before the policy]).
  if (promoting && options_.admission == TieredAdmission::kWeighed &&
      !state.policy->knows_next_uses() && rule_of(state.ruled, *promoting) != RuleAction::kPin &&
      !admission_.admits(*promoting, bytes, leaving)) {
    ++stats_.not_admitted;
    return false;
  }
  if (!card_takes(made - room)) return false;
  for (const PromotionAdmission::Victim& victim : leaving) {
    if (!evict_locked(victim.block, blocks_.at(victim.block), victim.bytes)) return false;
  }
  return true;
}

bool PrefetchPlacement::bring_in_locked(BlockId id, Block& block, std::span<const BlockId> keep,
                                        bool ahead) {
  Device& state = device_states_[static_cast<std::size_t>(block.device)];
  tell_policy_of_capacity_locked(block.device, state);
  // Once per promotion: on simcuda, as on a GPU, asking again at once is waiting.
  forget_promotions_done_locked(state);
  // Its pages on the host: all of them, or those an eviction in part sent there.
  const uint64_t coming = block.bytes - block.device_bytes;
  // Note [Two lanes]: the promotion need not wait for the evictions that make its room in the
  // budget when the card has room for it without them.
  const bool card_has_room = card_takes_locked(state, coming, 0, /*after_evictions=*/false);
  // The pages it has on the device stay there: it is not its own victim.
  std::vector<BlockId> kept(keep.begin(), keep.end());
  kept.push_back(id);
  if (!make_room_locked(block.device, state, coming, kept, id) ||
      !budgets_.take_device(block.device, coming)) {
    if (!ahead) {
      if (!card_has_room) ++stats_.held_by_the_card;
      ++stats_.promotions_refused;
    }
    return false;
  }
  // The whole block, not only its pages on the host (Note [Promoting a block in part on the
  // device]).
  if (const CUresult result =
          state.ops->prefetch(id, 0, block.size, /*to_device=*/true,
                              std::span(block.last_streams.data(), block.streams),
                              /*after_evictions=*/!card_has_room);
      result != CUDA_SUCCESS) {
    budgets_.give_device(block.device, coming);
    ++stats_.failed_prefetches;
    logging::warn("tiered (prefetch): promoting {} bytes of a block failed (CUresult {}); they "
                  "are reached on the host",
                  coming, static_cast<int>(result));
    return false;
  }
  block.device_bytes = block.bytes;
  block.arriving = true;
  block.streams = 0;
  if (core::MemoryEvents* const told = events_.load(std::memory_order_acquire))
    told->promoted(block.device, id, coming);
  state.on_device_bytes += coming;
  state.queued_in += coming;
  tell_moved_locked(state, id, block.bytes);
  ++stats_.promotions;
  stats_.promoted_bytes += coming;
  if (ahead) ++stats_.promoted_ahead;
  return true;
}

void PrefetchPlacement::promote_ahead_locked(Device& state, std::span<const BlockId> keep) {
  std::vector<BlockId> kept(keep.begin(), keep.end());
  // The launch's own promotions are in the policy's books already (each told as it was made:
  // tell_moved_locked), so they take no room beyond them.
  for (const BlockId id : state.policy->promote_ahead(/*room_taken=*/0, keep)) {
    const auto found = blocks_.find(id);
    if (found == blocks_.end() || found->second.leaving ||
        found->second.device_bytes == found->second.bytes ||
        rule_of(state.ruled, id) == RuleAction::kPreferHost || is_dead_locked(id))
      continue;
    if (bring_in_locked(id, found->second, kept, /*ahead=*/true)) kept.push_back(id);
  }
}

CUresult PrefetchPlacement::allocate(int device, uint64_t bytes, CUdeviceptr* out,
                                     std::optional<RuleAction> rule) noexcept {
  const std::lock_guard lock(mutex_);
  Device* state = device_state_locked(device);
  if (state == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const uint64_t pages = whole_pages(bytes);
  if (!budgets_.take_host(pages)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr base = 0;
  if (const CUresult result = make_locked(*state, device, bytes, rule, &base);
      result != CUDA_SUCCESS) {
    budgets_.give_host(pages);
    return result;
  }
  block_count_.fetch_add(1, std::memory_order_relaxed);
  // A managed block starts on the host: told so, and its prefetch in as a promotion.
  if (core::MemoryEvents* const told = events_.load(std::memory_order_acquire)) {
    told->allocated({.key = base, .bytes = bytes, .device = device,
                     .route = core::Route::kTiered});
    told->evicted(device, base, pages);
  }
  // A new block is brought in like a promotion, so that it is on the device where its first
  // writes land; the policy may evict others for it (nothing to keep: no launch is at hand).
  // One a rule prefers on the host stays there, and so does one that memory ran out for here.
  try {
    const auto captures_held_off = devices_.hold_if_may_move();
    if (captures_held_off.owns_lock() && rule != RuleAction::kPreferHost)
      bring_in_locked(base, blocks_.at(base), {});
  } catch (const std::bad_alloc&) {
  }
  *out = base;
  return CUDA_SUCCESS;
}

CUresult PrefetchPlacement::make_locked(Device& state, int device, uint64_t bytes,
                                        std::optional<RuleAction> rule,
                                        CUdeviceptr* out) noexcept {
  // Note [Managed memory and captures begun meanwhile]: held through the allocation, and its
  // release should the books have no room for it; the bring-in that follows takes the gate
  // again.
  const auto captures_held_off = devices_.hold_if_may_move();
  if (!captures_held_off.owns_lock()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUdeviceptr base = 0;
  if (const CUresult made = state.ops->allocate(bytes, &base); made != CUDA_SUCCESS) return made;
  const uint64_t pages = whole_pages(bytes);
  bool told_policy = false;
  try {
    Block& block = blocks_[base];
    block = Block{.device = device, .size = bytes, .bytes = pages, .rule = rule};
    state.policy->allocated(base, pages / kGranuleBytes, /*on_device=*/false);
    told_policy = true;
    if (rule) state.ruled.emplace(base, *rule);
  } catch (const std::bad_alloc&) {
    if (told_policy) state.policy->freed(base);
    blocks_.erase(base);
    (void)state.ops->release(base);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = base;
  return CUDA_SUCCESS;
}

std::optional<CUresult> PrefetchPlacement::free(CUdeviceptr base) noexcept {
  // The remap mover's frees, which are all of them by default, take no lock here.
  if (block_count_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  tiers::PrefetchOps* ops = nullptr;
  {
    const std::lock_guard lock(mutex_);
    const auto found = blocks_.find(base);
    if (found == blocks_.end()) return std::nullopt;
    // Note [A free waits outside the lock]
    Block& block = found->second;
    Device& state = device_states_[static_cast<std::size_t>(block.device)];
    if (!block.leaving) {
      forget_locked(base, state);
      block.leaving = true;
      state.leaving_bytes += block.device_bytes;  // nothing moves it meanwhile
    }
    ops = state.ops;
  }
  const CUresult waited = ops->wait_for_prefetches();
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(base);
  // Defensive: the ledger lets one free of a block through, so none released it meanwhile.
  if (found == blocks_.end()) return CUDA_ERROR_INVALID_VALUE;
  const CUresult freed = waited == CUDA_SUCCESS ? release_locked(found) : waited;
  if (freed != CUDA_SUCCESS) take_back_locked(base, found->second);
  return freed;
}

void PrefetchPlacement::take_back_locked(BlockId id, Block& block) noexcept {
  Device& state = device_states_[static_cast<std::size_t>(block.device)];
  bool told = false;
  try {
    if (block.rule) state.ruled.emplace(id, *block.rule);
    state.policy->allocated(id, block.bytes / kGranuleBytes, /*on_device=*/false);
    told = true;
    if (block.device_bytes != 0) state.policy->moved(id, block.device_bytes / kGranuleBytes);
  } catch (const std::bad_alloc&) {
    // It stays leaving: never moved again, its pages charged where they are.
    if (told) state.policy->freed(id);
    state.ruled.erase(id);
    logging::warn("tiered (prefetch): a block of {} bytes whose free failed stays where it is "
                  "on device {} for good (out of memory for the policy's books)",
                  block.bytes, block.device);
    return;
  }
  state.leaving_bytes -= block.device_bytes;
  block.leaving = false;
}

CUresult PrefetchPlacement::free_locked(std::map<BlockId, Block>::iterator found) noexcept {
  Device& state = device_states_[static_cast<std::size_t>(found->second.device)];
  // A prefetch of this block may still be queued on the mover's streams.
  if (const CUresult waited = state.ops->wait_for_prefetches(); waited != CUDA_SUCCESS)
    return waited;
  return release_locked(found);
}

CUresult PrefetchPlacement::release_locked(std::map<BlockId, Block>::iterator found) noexcept {
  const Device& state = device_states_[static_cast<std::size_t>(found->second.device)];
  if (const CUresult released = state.ops->release(found->first); released != CUDA_SUCCESS)
    return released;
  drop_locked(found);
  return CUDA_SUCCESS;
}

void PrefetchPlacement::drop_locked(std::map<BlockId, Block>::iterator found) noexcept {
  const CUdeviceptr base = found->first;
  const Block block = found->second;
  Device& state = device_states_[static_cast<std::size_t>(block.device)];
  budgets_.give_device(block.device, block.device_bytes);
  state.on_device_bytes -= block.device_bytes;
  budgets_.give_host(block.bytes);
  if (block.leaving) {
    state.leaving_bytes -= block.device_bytes;
  } else {
    forget_locked(base, state);
  }
  blocks_.erase(found);
  block_count_.fetch_sub(1, std::memory_order_relaxed);
}

void PrefetchPlacement::forget_context(int device) noexcept {
  const std::lock_guard lock(mutex_);
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return;
  Device& state = device_states_[static_cast<std::size_t>(device)];
  if (state.ops != nullptr) state.ops->forget_context();
  state.queued_in = 0;  // nothing a reset left can still be on its way
}

bool PrefetchPlacement::forget_lost(CUdeviceptr base) noexcept {
  if (block_count_.load(std::memory_order_relaxed) == 0) return false;
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(base);
  if (found == blocks_.end()) return false;
  // Its memory went with the reset, or, made in another context, goes now.
  (void)device_states_[static_cast<std::size_t>(found->second.device)].ops->release(base);
  drop_locked(found);
  return true;
}

void PrefetchPlacement::forget_locked(BlockId id, Device& state) noexcept {
  try {
    state.policy->freed(id);
  } catch (const std::bad_alloc&) {
    policy_out_of_memory();
  }
  state.ruled.erase(id);
  admission_.forget(id);
}

void PrefetchPlacement::tell_moved_locked(Device& state, BlockId id,
                                          uint64_t device_bytes) noexcept {
  try {
    state.policy->moved(id, device_bytes / kGranuleBytes);
  } catch (const std::bad_alloc&) {
    policy_out_of_memory();
  }
}

void PrefetchPlacement::policy_out_of_memory() noexcept {
  static std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed))
    logging::warn("tiered (prefetch): out of memory for the policy's books; its plans may "
                  "miss a move the mover made (said once)");
}

uint64_t PrefetchPlacement::free_dead_locked(int device, uint64_t bytes,
                                             std::span<const BlockId> keep,
                                             std::optional<BlockId> promoting) noexcept {
  if (dead_ == nullptr) return 0;
  uint64_t freed = 0;
  for (const uint64_t base : dead_->dead()) {
    if (freed >= bytes) break;
    // The submission at hand names the blocks in `keep`, and the caller holds on to them.
    if (base == promoting || std::ranges::find(keep, base) != keep.end()) continue;
    const auto block = blocks_.find(base);
    if (block == blocks_.end() || block->second.device != device ||
        block->second.device_bytes == 0 || block->second.leaving ||
        !dead_->give_up_if_dead(base))
      continue;
    const uint64_t pages = block->second.bytes;
    const uint64_t room = block->second.device_bytes;  // an eviction in part left the rest
    if (const CUresult result = free_locked(block); result != CUDA_SUCCESS) {
      // Still the mover's, on the device and in the budget; only its owner has let it go.
      ++stats_.failed_prefetches;
      logging::warn("tiered (prefetch): freeing a dead block of {} bytes failed (CUresult {}); "
                    "it stays on device {}, as a block nothing uses, until the process ends",
                    pages, static_cast<int>(result), device);
      continue;
    }
    freed += room;
    ++stats_.dead_freed;
  }
  return freed;
}

bool PrefetchPlacement::is_dead_locked(BlockId id) noexcept {
  return dead_ != nullptr && dead_->is_dead(id);
}

void PrefetchPlacement::before_submission(const core::SubmissionUse& use) noexcept {
  if (block_count_.load(std::memory_order_relaxed) == 0 || use.count == 0) return;
  try {
    const std::lock_guard lock(mutex_);
    // Held through the queries, waits and prefetches below, so that no capture begins among them.
    const auto captures_held_off = devices_.hold_if_may_move();
    const bool may_move = captures_held_off.owns_lock();
    // The blocks of each device (a submission rarely names more than one device's).
    for (std::size_t d = 0; d < kDevices; ++d) {
      Device& state = device_states_[d];
      if (state.policy == nullptr) continue;
      std::vector<BlockId> ours;
      for (std::size_t i = 0; i < use.count; ++i) {
        const auto found = blocks_.find(use.blocks[i]);
        // A block being freed is the program's no longer (Note [A free waits outside the lock]).
        if (found != blocks_.end() && found->second.device == static_cast<int>(d) &&
            !found->second.leaving)
          ours.push_back(use.blocks[i]);
      }
      if (ours.empty()) continue;
      state.policy->used(use.sequence, policy_stream(use.stream), ours);
      if (core::MemoryEvents* const told = events_.load(std::memory_order_acquire))
        told->used(static_cast<int>(d), policy_stream(use.stream), ours);
      // Note [The policy's capacity] in placement/tiered_placement.h: the policy decides below,
      // and for the launches to come, with the room there is now (other allocations take and
      // give it back between launches), read afresh where a block has pages to bring in.
      if (may_move) {
        if (std::any_of(ours.begin(), ours.end(), [&](BlockId id) {
              const Block& block = blocks_.at(id);
              return block.bytes != block.device_bytes;
            }))
          budgets_.read_device_figures_again(static_cast<int>(d));
        tell_policy_of_capacity_locked(static_cast<int>(d), state);
      }
      bool must_wait = false;  // for the mover's stream (Note [Launches after a promotion])
      for (const BlockId id : ours) {
        const auto found = blocks_.find(id);
        if (found == blocks_.end()) continue;  // defensive: nothing frees the blocks in `ours`
        Block& block = found->second;
        // Not asked during a capture: a query of the mover's event there would break a capture
        // in global mode, and no wait is made then anyway.
        if (block.arriving && may_move) {
          block.arriving = !state.ops->promotions_done();
          must_wait |= block.arriving;
        }
        if (const uint64_t on_host = block.bytes - block.device_bytes; may_move && on_host != 0) {
          // Note [Rules before the policy] in placement/tiered_placement.h
          const std::optional<RuleAction> rule = rule_of(state.ruled, id);
          if (!is_dead_locked(id) &&
              (rule == RuleAction::kPin ||
               (rule != RuleAction::kPreferHost && state.policy->should_promote(id)))) {
            must_wait |= bring_in_locked(id, block, ours);
          } else {
            ++stats_.promotions_refused;
          }
        }
        // After the move: this submission is queued after it, and the next move waits for it.
        note_use(block, use.stream);
        admission_.used(id, use.sequence);
      }
      // Not while a capture is in progress: a wait on the mover's event would join the graph.
      if (must_wait && may_move) {
        if (const CUresult ordered = state.ops->order_stream_after_prefetches(use.stream);
            ordered != CUDA_SUCCESS) {
          // The launch then overlaps its prefetches: slower where it faults, never wrong.
          ++stats_.failed_prefetches;
          logging::debug("tiered (prefetch): a stream could not wait for its prefetches ({})",
                         static_cast<int>(ordered));
        }
      }
      // Then the blocks for the launches to come: this launch does not wait for them.
      if (may_move) promote_ahead_locked(state, ours);
    }
  } catch (const std::bad_alloc&) {
    // The submission goes ahead with its blocks where they are.
  }
}

bool PrefetchPlacement::make_device_room(int device, uint64_t bytes) noexcept {
  if (block_count_.load(std::memory_order_relaxed) == 0) return false;
  tiers::PrefetchOps* evicted_by = nullptr;
  bool made = false;
  // Held through the evictions and the wait for them, without the lock as with it.
  core::CaptureGate::Hold captures_held_off;
  try {
    const std::lock_guard lock(mutex_);
    Device* state = device_state_locked(device);
    if (state == nullptr) return false;
    captures_held_off = devices_.hold_if_may_move();
    if (!captures_held_off.owns_lock()) return false;
    tell_policy_of_capacity_locked(device, *state);
    const uint64_t evictions = stats_.evictions;
    // The room is the budget's: the allocation that wants it is the driver's to place.
    made = make_room_locked(device, *state, bytes, {}, std::nullopt);
    if (stats_.evictions != evictions) evicted_by = state->ops;
  } catch (const std::bad_alloc&) {
    return false;
  }
  // The budget took the evicted bytes back as their prefetches were queued, but the pages leave
  // the device only once those run, and the driver is asked for the room as soon as this returns:
  // by this thread, or by another that the budget admits into that room (also when the evictions
  // fell short of the room asked). Waited for without the lock, which every submission takes.
  if (evicted_by == nullptr) return made;
  if (const CUresult waited = evicted_by->wait_for_prefetches(); waited != CUDA_SUCCESS) {
    logging::debug("tiered (prefetch): waiting for evictions failed ({})",
                   static_cast<int>(waited));
    return false;
  }
  return made;
}

void PrefetchPlacement::stream_ended(uint64_t stream) noexcept {
  if (block_count_.load(std::memory_order_relaxed) == 0) return;
  const std::lock_guard lock(mutex_);
  for (auto& [base, block] : blocks_) {
    const auto used = block.last_streams.begin();
    const auto end = used + static_cast<std::ptrdiff_t>(block.streams);
    block.streams = static_cast<std::size_t>(std::remove(used, end, stream) - used);
  }
}

void PrefetchPlacement::all_streams_ended() noexcept {
  if (block_count_.load(std::memory_order_relaxed) == 0) return;
  const std::lock_guard lock(mutex_);
  for (auto& [base, block] : blocks_) block.streams = 0;
}

std::optional<uint64_t> PrefetchPlacement::device_bytes(CUdeviceptr base) const noexcept {
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(base);
  if (found == blocks_.end()) return std::nullopt;
  return found->second.device_bytes;
}

std::optional<bool> PrefetchPlacement::any_on_host(CUdeviceptr base) const noexcept {
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(base);
  if (found == blocks_.end()) return std::nullopt;
  return found->second.device_bytes < found->second.bytes;
}

PrefetchPlacement::Held PrefetchPlacement::held(int device) const noexcept {
  const std::lock_guard lock(mutex_);
  Held held;
  for (const auto& [base, block] : blocks_) {
    if (block.device != device) continue;
    ++held.blocks;
    if (block.device_bytes != 0) ++held.on_device;
    if (block.device_bytes != 0 && block.device_bytes != block.bytes) ++held.in_part;
    held.device_bytes += block.device_bytes;
    held.host_bytes += block.bytes - block.device_bytes;
  }
  return held;
}

PrefetchStats PrefetchPlacement::stats() const noexcept {
  const std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace vramspill::placement
