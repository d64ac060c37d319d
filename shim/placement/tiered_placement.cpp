#include "placement/tiered_placement.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/use_tracker.h"
#include "placement/rule_victims.h"
#include "policies/registry.h"
#include "telemetry/log.h"
#include "telemetry/nvtx.h"

namespace vramspill::placement {
namespace {

using tiers::GranuleArena;
using tiers::GranuleKind;
using tiers::GranuleMove;
using tiers::kGranuleBytes;

uint64_t more_than(uint64_t wanted, uint64_t pooled) {
  return wanted > pooled ? wanted - pooled : 0;
}

// What an arena holds, in the bytes the budgets charge for it (Note [Tiered budgets]).
struct HeldBytes {
  uint64_t device = 0;
  uint64_t host = 0;
};
HeldBytes held_bytes(const tiers::ArenaStats& held) {
  return {.device = (held.device_granules + held.pooled_device_granules) * kGranuleBytes,
          .host = (held.host_granules + held.staged_host_granules + held.pooled_host_granules) *
                  kGranuleBytes};
}

// A promotion of the host granules `block` has now, by count: what is charged for it is what it
// may move, should the block change before the move (a staged part it finishes first may fall
// back to the host: Note [Staged promotions] in tiers/granule_arena.h).
GranuleMove promotion_of(const tiers::ArenaBlock& block) {
  return {.base = block.base, .to = GranuleKind::kDevice, .granules = block.host_granules()};
}

}  // namespace

TieredPlacement::TieredPlacement(TieredBudgets& budgets, ArenaSource& arenas,
                                 core::RemapWindow& window, const TieredOptions& options,
                                 core::UseTracker* uses) noexcept
    : budgets_(budgets), arenas_(arenas), window_(window), options_(options) {
  if (options_.window == WindowMode::kTracked && uses != nullptr)
    tracked_.emplace(*uses, with_arenas_);
  error_ = policy_error(options_);
}

std::string policy_error(const TieredOptions& options) noexcept {
  try {
    policies::MadePolicy made = policies::make_policy(options.policy, {});
    return made.policy == nullptr ? std::move(made.error) : std::string();
  } catch (const std::bad_alloc&) {
    return "out of memory while choosing the eviction policy";
  }
}

std::unique_ptr<policies::EvictionPolicy> make_device_policy(const TieredOptions& options,
                                                             uint64_t room_bytes) {
  return policies::make_policy(options.policy,
                               {.capacity_granules = room_bytes / kGranuleBytes,
                                .invariant_mode = options.invariant_mode})
      .policy;
}

TieredPlacement::Device* TieredPlacement::device_state(int device) noexcept {
  if (!error_.empty() || device < 0 || static_cast<std::size_t>(device) >= kDevices) return nullptr;
  const std::lock_guard lock(devices_mutex_);
  std::unique_ptr<Device>& state = devices_[static_cast<std::size_t>(device)];
  if (state != nullptr) return state.get();
  try {
    GranuleArena* arena = arenas_.arena(device);
    if (arena == nullptr) return nullptr;
    std::unique_ptr<policies::EvictionPolicy> policy =
        make_device_policy(options_, budgets_.device_room(device));
    if (policy == nullptr) return nullptr;
    auto created = std::make_unique<Device>();
    created->arena = arena;
    created->policy = std::move(policy);
    state = std::move(created);
    with_arenas_.fetch_or(uint64_t{1} << device, std::memory_order_release);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  return state.get();
}

bool TieredPlacement::charge(int device, Device& state, uint64_t device_granules,
                             uint64_t host_granules) {
  const uint64_t device_bytes = device_granules * kGranuleBytes;
  const uint64_t host_bytes = host_granules * kGranuleBytes;
  if (device_bytes != 0 && !budgets_.take_device(device, device_bytes)) return false;
  if (host_bytes != 0 && !budgets_.take_host(host_bytes)) {
    if (device_bytes != 0) budgets_.give_device(device, device_bytes);
    return false;
  }
  state.charged_device += device_bytes;
  state.charged_host += host_bytes;
  return true;
}

void TieredPlacement::settle(int device, Device& state) {
  state.arena->trim();
  const auto [device_bytes, host_bytes] = held_bytes(state.arena->stats());
  // Every operation charged first (Note [Tiered budgets]): the arena holds at most that much.
  if (state.charged_device > device_bytes) {
    budgets_.give_device(device, state.charged_device - device_bytes);
    state.charged_device = device_bytes;
  }
  if (state.charged_host > host_bytes) {
    budgets_.give_host(state.charged_host - host_bytes);
    state.charged_host = host_bytes;
  }
  if (state.charged_device < device_bytes || state.charged_host < host_bytes)
    charge_what_was_not(device, state, device_bytes, host_bytes);
}

bool TieredPlacement::charge_the_rest(int device, Device& state) {
  const HeldBytes held = held_bytes(state.arena->stats());
  const uint64_t device_past = more_than(held.device, state.charged_device);
  const uint64_t host_past = more_than(held.host, state.charged_host);
  return (device_past == 0 && host_past == 0) ||
         charge(device, state, device_past / kGranuleBytes, host_past / kGranuleBytes);
}

// Note [Held past the charge]
// An arena holding more than was charged is a broken Note [Tiered budgets], which the tests
// abort on. In a user's job the budgets take what they can of it, so that the books stay true
// to what was taken: had the charge simply been raised to what is held, the budget would later
// be given back bytes it never took, and its room would grow past the limit for good.
void TieredPlacement::charge_what_was_not(int device, Device& state, uint64_t device_bytes,
                                          uint64_t host_bytes) {
  const uint64_t device_past = device_bytes - std::min(device_bytes, state.charged_device);
  const uint64_t host_past = host_bytes - std::min(host_bytes, state.charged_host);
  if (options_.invariant_mode == policies::InvariantMode::kAbort) {
    std::fprintf(stderr,
                 "vramspill: tiered arena of device %d holds %llu device and %llu host bytes "
                 "it was not charged for\n",
                 device, static_cast<unsigned long long>(device_past),
                 static_cast<unsigned long long>(host_past));
    std::abort();
  }
  if (device_past != 0 && budgets_.take_device(device, device_past))
    state.charged_device = device_bytes;
  if (host_past != 0 && budgets_.take_host(host_past)) state.charged_host = host_bytes;
  static constinit std::atomic<bool> said{false};
  if (!said.exchange(true))
    logging::warn(
        "tiered: device {}'s arena held {} device and {} host bytes its budgets had not been "
        "charged for (a vramspill bug: please report it); the budgets took what they could "
        "(said once)",
        device, device_past, host_past);
}

uint64_t TieredPlacement::usable_device_granules(int device, const Device& state) {
  return budgets_.device_room(device) / kGranuleBytes + state.arena->stats().pooled_device_granules;
}

bool TieredPlacement::learn_of_new_block(Device& state, CUdeviceptr base, uint64_t granules,
                                         uint64_t on_device,
                                         std::optional<RuleAction> rule) noexcept {
  bool policy_knows = false;
  try {
    if (rule) state.ruled.emplace(base, *rule);
    state.policy->allocated(base, granules, /*on_device=*/false);
    policy_knows = true;
    if (on_device != 0) state.policy->moved(base, on_device);
    return true;
  } catch (const std::bad_alloc&) {
    state.ruled.erase(base);
    if (policy_knows) {
      try {
        state.policy->freed(base);
      } catch (const std::bad_alloc&) {  // the policy keeps a stale entry; its checks drop it later
      }
    }
    return false;
  }
}

// Note [A tiered block in the trace]
// A tiered block's alloc event comes from here, under the device's lock, not from the ledger
// (which records it after this returns): so no eviction of the block by another thread can be
// told before the block itself, and the events can say at once which of its granules were placed
// on the host, as an evict right after the alloc.
void TieredPlacement::tell_of_allocation(int device, CUdeviceptr base, uint64_t bytes,
                                         uint64_t host_granules) noexcept {
  core::MemoryEvents* const told = events_.load(std::memory_order_acquire);
  if (told == nullptr) return;
  told->allocated({.key = base, .bytes = bytes, .device = device, .route = core::Route::kTiered});
  if (host_granules != 0) told->evicted(device, base, host_granules * kGranuleBytes);
}

TieredPlacement::MoveWindow::Closed::Closed(core::RemapWindow& window) noexcept
    : exclusive(window.close()) {}

const core::RemapWindow::Exclusive& TieredPlacement::MoveWindow::closed() noexcept {
  if (!closed_) {
    asked_ = std::chrono::steady_clock::now();
    closed_.emplace(placement_.window_);
  }
  return closed_->exclusive;
}

TieredPlacement::MoveWindow::~MoveWindow() {
  if (!closed_) return;
  // Note [Evictions ahead of promotions] in tiers/granule_mover.h: only a batch of the same
  // window follows a batch ahead's marks, and no submission may find its copies still running
  // in the safe window. A failed wait leaves them to the driver, whose context is then most
  // likely lost.
  if (ahead_ != nullptr) {
    if (wait_for_ahead_) {
      (void)ahead_->settle(closed_->exclusive);
    } else {
      ahead_->end_batches_ahead(closed_->exclusive);
    }
  }
  closed_.reset();  // open again
  const auto open_again = std::chrono::steady_clock::now();
  const std::lock_guard lock(placement_.stats_mutex_);
  ++placement_.stats_.windows;
  placement_.stats_.window_nanoseconds += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(open_again - asked_).count());
}

tiers::MoveOutcome TieredPlacement::move(int device, Device& state,
                                         std::span<const GranuleMove> moves, MoveWindow& window,
                                         Timing timing) {
  core::MemoryEvents* const told = events_.load(std::memory_order_acquire);
  std::vector<uint64_t> before;  // only for `told`: may throw std::bad_alloc, as callers expect
  if (told != nullptr) {
    before.reserve(moves.size());
    for (const GranuleMove& moving : moves) {
      const auto block = state.arena->block_containing(moving.base);
      before.push_back(block ? block->device_granules : 0);
    }
  }
  tiers::MoveOutcome outcome;
  switch (timing) {
    case Timing::kNow:
      outcome = state.arena->move(moves, window.closed(), tracked_ ? &*tracked_ : nullptr);
      break;
    case Timing::kStaged:
      outcome = state.arena->stage(moves, window.closed(), *tracked_);
      break;
    case Timing::kFinish:
      outcome = state.arena->finish_staged(moves, window.closed(), tracked_ ? &*tracked_ : nullptr);
      break;
    case Timing::kOnStream:
      outcome = state.arena->move_on_stream(moves, window.closed(), *tracked_);
      break;
    case Timing::kAhead:
      outcome = state.arena->evict_ahead(moves, window.closed(), tracked_ ? &*tracked_ : nullptr);
      window.end_batches_ahead_before_opening(*state.arena, /*wait=*/!tracked_);
      break;
  }
  nvtx::evicted(outcome.to_host, outcome.to_host * kGranuleBytes);
  nvtx::promoted(outcome.to_device, outcome.to_device * kGranuleBytes);
  if (outcome.result != CUDA_SUCCESS) {
    // What a failed copy or remap leaves is the block where it was, still mapped and whole
    // (Note [Moving a granule] in tiers/granule_arena.h): launches reach it in place, and the
    // next launch that needs it tries again. Said once; the summary counts every one.
    static constinit std::atomic<bool> said{false};
    if (!said.exchange(true))
      logging::warn(
          "tiered: a move on device {} stopped when the driver answered CUresult {}; its blocks "
          "stay where they were (launches reach them in place) and later moves try again "
          "(said once; the exit summary counts failed moves)",
          device, static_cast<int>(outcome.result));
  }
  {
    const std::lock_guard lock(stats_mutex_);
    if (outcome.result != CUDA_SUCCESS) ++stats_.failed_moves;
    stats_.evicted_granules += outcome.to_host;
    stats_.promoted_granules += outcome.to_device;
    if (timing == Timing::kStaged) stats_.staged_granules += outcome.to_device;
    stats_.streamed_granules += outcome.on_stream;
  }
  if (told != nullptr) tell_of_moves(*told, device, state, moves, before);
  return outcome;
}

void TieredPlacement::tell_of_moves(core::MemoryEvents& events, int device, const Device& state,
                                    std::span<const GranuleMove> moves,
                                    std::span<const uint64_t> before) const {
  for (std::size_t i = 0; i < moves.size(); ++i) {
    const auto block = state.arena->block_containing(moves[i].base);
    const uint64_t now = block ? block->device_granules : 0;
    if (now < before[i]) events.evicted(device, moves[i].base, (before[i] - now) * kGranuleBytes);
    if (now > before[i]) events.promoted(device, moves[i].base, (now - before[i]) * kGranuleBytes);
  }
}

void TieredPlacement::log_learning(int device, Device& state) {
  const uint64_t changes = state.policy->learning_changes();
  if (changes == state.learning_changes) return;
  state.learning_changes = changes;
  logging::limited(LogLevel::kInfo, RateKey::kPolicyLearning, "tiered policy {} on device {}: {}",
                   state.policy->name(), device, state.policy->learned_state());
}

void TieredPlacement::tell_policy_of_moves(Device& state, std::span<const GranuleMove> moves) {
  for (const GranuleMove& moved : moves) {
    if (const auto block = state.arena->block_containing(moved.base))
      state.policy->moved(moved.base, block->device_granules);
  }
}

// Note [Rules before the policy]
TieredPlacement::Victims TieredPlacement::choose_victims(Device& state, uint64_t granules,
                                                         std::span<const policies::BlockId> keep) {
  const RuledVictims ruled =
      victims_by_rule(state.ruled, keep, granules, [&](policies::BlockId block) -> uint64_t {
        const auto held = state.arena->block_containing(block);
        return held ? held->device_granules : 0;
      });
  Victims victims{.blocks = ruled.first};
  if (ruled.covered < granules) {
    // The arena moves any number of a block's granules, in whole chunks (tiers::GranuleMove).
    const policies::Victims chosen =
        state.policy->choose_victims(granules - ruled.covered, ruled.keep, /*in_part=*/true);
    victims.blocks.insert(victims.blocks.end(), chosen.blocks.begin(), chosen.blocks.end());
    victims.in_part = chosen.partial_last;
    victims.enough = chosen.enough;
  }
  return victims;
}

void TieredPlacement::make_room(int device, Device& state, uint64_t granules,
                                std::span<const policies::BlockId> keep, MoveWindow& window) {
  if (!arenas_.may_synchronize()) return;  // Note [No moves during a capture]
  // Room the blocks cannot give in full buys nothing: the request that asked (memory outside the
  // arena, a new block larger than the budget) is spilled or split all the same, and the blocks
  // evicted for it would come back at their next launch.
  const Victims victims = choose_victims(state, granules, keep);
  if (victims.enough) evict(device, state, victims, granules, /*ahead=*/false, window);
}

void TieredPlacement::evict(int device, Device& state, const Victims& victims, uint64_t granules,
                            bool ahead, MoveWindow& window) {
  if (!arenas_.may_synchronize()) return;  // Note [No moves during a capture]
  std::vector<GranuleMove> evictions;
  std::vector<uint64_t> copies;  // each eviction's granules that need host granules to go to
  uint64_t evicted = 0;
  uint64_t copied = 0;
  for (const policies::BlockId victim : victims.blocks) {
    if (evicted >= granules) break;
    const auto block = state.arena->block_containing(victim);
    if (!block || block->device_granules == 0) continue;
    const uint64_t left = granules - evicted;
    if (victims.in_part && block->staged_granules == 0 && left < block->device_granules) {
      // A chunk moves whole (Note [Chunks] in tiers/granule_chunks.h): the host pays for what
      // really moves.
      const uint64_t moving = state.arena->eviction_granules(victim, left);
      evictions.push_back({.base = victim, .to = GranuleKind::kHost, .granules = left});
      copies.push_back(moving);
      evicted += moving;
    } else {
      // A staged block's staged granules go back without a copy (Note [Staged promotions]).
      evictions.push_back({.base = victim, .to = GranuleKind::kHost, .granules = 0});
      copies.push_back(block->device_granules - block->staged_granules);
      evicted += block->device_granules;
    }
    copied += copies.back();
  }
  // The victims' granules need host granules: as many victims as the host limit can take.
  const uint64_t pooled_host = state.arena->stats().pooled_host_granules;
  while (!evictions.empty() && !charge(device, state, 0, more_than(copied, pooled_host))) {
    copied -= copies.back();
    copies.pop_back();
    evictions.pop_back();
  }
  if (evictions.empty()) return;
  const Timing timing = ahead ? Timing::kAhead : tracked_ ? Timing::kOnStream : Timing::kNow;
  move(device, state, evictions, window, timing);
  tell_policy_of_moves(state, evictions);
}

TieredPlacement::Allocated TieredPlacement::allocate(int device, uint64_t bytes, CUdeviceptr* out,
                                                     std::optional<RuleAction> rule) noexcept {
  if (out == nullptr || bytes == 0) return {.result = CUDA_ERROR_INVALID_VALUE};
  Device* state = device_state(device);
  if (state == nullptr) return {.result = CUDA_ERROR_NOT_SUPPORTED};
  const std::lock_guard lock(state->mutex);
  Allocated allocated{.result = CUDA_ERROR_OUT_OF_MEMORY};
  try {
    const uint64_t granules = GranuleArena::granules_for(bytes);
    const bool on_host_only = rule == RuleAction::kPreferHost;  // Note [Rules before the policy]
    if (!on_host_only && usable_device_granules(device, *state) < granules) {
      MoveWindow window(*this);
      make_room(device, *state, granules - usable_device_granules(device, *state), {}, window);
    }
    const uint64_t on_device =
        on_host_only ? 0 : std::min(granules, usable_device_granules(device, *state));
    const tiers::ArenaStats pooled = state->arena->stats();
    if (!charge(device, *state, more_than(on_device, pooled.pooled_device_granules),
                more_than(granules - on_device, pooled.pooled_host_granules))) {
      allocated.over_budgets = true;
    } else {
      allocated.result = state->arena->allocate(bytes, on_device, out);
      if (allocated.result == CUDA_SUCCESS && !charge_the_rest(device, *state)) {
        (void)state->arena->free(*out);
        allocated = {.result = CUDA_ERROR_OUT_OF_MEMORY, .over_budgets = true};
      }
      if (allocated.result == CUDA_SUCCESS &&
          !learn_of_new_block(*state, *out, granules, on_device, rule)) {
        (void)state->arena->free(*out);
        allocated = {.result = CUDA_ERROR_OUT_OF_MEMORY};
      }
      if (allocated.result == CUDA_SUCCESS)
        tell_of_allocation(device, *out, bytes, granules - on_device);
    }
  } catch (const std::bad_alloc&) {  // making room or charging: no block was made
  }
  settle(device, *state);
  return allocated;
}

bool TieredPlacement::make_device_room(int device, uint64_t bytes) noexcept {
  Device* state = device_state(device);
  if (state == nullptr) return false;
  const std::lock_guard lock(state->mutex);
  try {
    const uint64_t room = budgets_.device_room(device);
    if (room >= bytes) return true;
    const uint64_t granules = GranuleArena::granules_for(bytes - room);
    const uint64_t pooled = state->arena->stats().pooled_device_granules;
    if (pooled < granules) {
      MoveWindow window(*this);
      make_room(device, *state, granules - pooled, {}, window);
    }
    state->arena->give_back_device_granules(granules);
  } catch (const std::bad_alloc&) {  // what was given back stays given back
  }
  settle(device, *state);
  return budgets_.device_room(device) >= bytes;
}

CUresult TieredPlacement::free(int device, CUdeviceptr base) noexcept {
  Device* state = device_state(device);
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::lock_guard lock(state->mutex);
  if (!state->arena->free(base)) return CUDA_ERROR_INVALID_VALUE;
  state->ruled.erase(base);
  try {
    state->policy->freed(base);
  } catch (const std::bad_alloc&) {  // the policy keeps a stale entry; its checks drop it later
  }
  settle(device, *state);
  return CUDA_SUCCESS;
}

void TieredPlacement::forget_context(int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return;
  Device* state = nullptr;
  {
    const std::lock_guard lock(devices_mutex_);
    state = devices_[static_cast<std::size_t>(device)].get();
  }
  if (state == nullptr) return;  // no arena yet: none of its copies or lanes went
  const std::lock_guard lock(state->mutex);
  state->arena->forget_context();
}

void TieredPlacement::before_launch(int device, uint64_t sequence, uint32_t stream,
                                    std::span<const policies::BlockId> blocks) noexcept {
  if (blocks.empty()) return;
  Device* state = device_state(device);
  if (state == nullptr) return;
  const std::lock_guard lock(state->mutex);
  if (core::MemoryEvents* const told = events_.load(std::memory_order_acquire))
    told->used(device, stream, blocks);
  // Only a promotion changes what the budgets were charged: a launch whose blocks are all on
  // the device (the common case) does not settle them, which would cost a walk over every block.
  bool promoting = false;
  try {
    state->policy->used(sequence, stream, blocks);
    log_learning(device, *state);
    const bool may_move = arenas_.may_synchronize();  // Note [No moves during a capture]
    MoveWindow window(*this);
    // The staged blocks the launch touches are finished first (Note [Staged promotions]): only
    // their staged granules, which were charged when they were staged. What a block staged in
    // part (the driver had too little memory for the rest) still has on the host is then a
    // promotion like any other, charged below; one that stays on the host leaves the staged
    // part finished all the same. During a capture the launch reaches them in place, and the
    // next one finishes them.
    std::vector<GranuleMove> staged;
    for (const CUdeviceptr base : blocks) {
      if (!may_move || !state->arena->any_staged()) break;  // the launch path's common case
      const auto block = state->arena->block_containing(base);
      if (block && block->base == base && block->staged_granules != 0)
        staged.push_back({.base = base, .to = GranuleKind::kDevice, .granules = 0});
    }
    if (!staged.empty()) {
      promoting = true;
      move(device, *state, staged, window, Timing::kFinish);
      tell_policy_of_moves(*state, staged);
    }
    // The blocks to bring in, and how many granules they need, decided first: one window makes
    // room for all of them and one moves them.
    std::vector<GranuleMove> promotions;
    uint64_t needed = 0;
    uint64_t refused = 0;
    uint64_t ahead = 0;  // promotions for later launches (Note [Promoting ahead])
    bool capacity_known = false;
    for (const CUdeviceptr base : blocks) {
      const auto block = state->arena->block_containing(base);
      if (!block || block->base != base || block->host_granules() == 0) continue;
      if (std::any_of(promotions.begin(), promotions.end(),
                      [&](const GranuleMove& move) { return move.base == base; }))
        continue;
      if (!capacity_known) {
        // The room the policy decides with, and the promotions are made in, is read fresh: a
        // pool's memory the driver took back since is room (Note [Refreshing pool figures]).
        // Not during a capture, when nothing moves.
        if (may_move) budgets_.read_device_figures_again(device);
        tell_policy_of_capacity(device, *state);
        capacity_known = true;
      }
      // Note [Rules before the policy]
      const std::optional<RuleAction> rule = rule_of(state->ruled, base);
      const bool promote = rule == RuleAction::kPin ||
                           (rule != RuleAction::kPreferHost && state->policy->should_promote(base));
      if (!promote) {
        ++refused;
        continue;
      }
      promotions.push_back(promotion_of(*block));
      needed += promotions.back().granules;
    }
    if (!may_move) {
      refused += promotions.size();
      promotions.clear();
    }
    if (!promotions.empty()) {
      promoting = true;
      const std::size_t own = promotions.size();
      std::vector<policies::BlockId> keep(blocks.begin(), blocks.end());
      needed += promote_ahead(*state, needed, promotions, keep);
      // What does not fit stays on the host, the blocks named ahead first: the launch's own
      // kernel reaches its blocks in place.
      const auto leave_out_until = [&](uint64_t room) {
        while (!promotions.empty() && room < needed) {
          needed -= promotions.back().granules;
          promotions.pop_back();
          if (promotions.size() < own) ++refused;
        }
      };
      // The victims are chosen before anything moves, so that none is evicted for promotions
      // that would not fit even with all of them gone.
      const uint64_t usable = usable_device_granules(device, *state);
      Victims victims;
      uint64_t evictable = 0;
      if (usable < needed) {
        victims = choose_victims(*state, needed - usable, keep);
        for (const policies::BlockId victim : victims.blocks) {
          if (const auto held = state->arena->block_containing(victim))
            evictable += held->device_granules;
        }
      }
      leave_out_until(usable + evictable);
      if (usable < needed) evict(device, *state, victims, needed - usable, /*ahead=*/true, window);
      leave_out_until(usable_device_granules(device, *state));  // the host limit may say no
      ahead = promotions.size() > own ? promotions.size() - own : 0;
      if (!promotions.empty() &&
          charge(device, *state, more_than(needed, state->arena->stats().pooled_device_granules),
                 0)) {
        // The launch's own blocks are remapped before it is queued, and copied in the window or,
        // with the tracked window, on a stream the launch waits on (Note [Moves copied on the
        // stream]); the blocks ahead are copied while the job runs (Note [Staged promotions]).
        const std::span<const GranuleMove> all(promotions);
        const std::size_t now = tracked_ ? std::min(own, promotions.size()) : promotions.size();
        move(device, *state, all.first(now), window, tracked_ ? Timing::kOnStream : Timing::kNow);
        if (now < promotions.size()) move(device, *state, all.subspan(now), window, Timing::kStaged);
        tell_policy_of_moves(*state, promotions);
      } else {
        refused += promotions.size() - ahead;
        ahead = 0;
      }
    }
    const std::lock_guard stats_lock(stats_mutex_);
    stats_.promotions_refused += refused;
    stats_.promoted_ahead += ahead;
  } catch (const std::bad_alloc&) {  // no promotion this time: the kernel reaches it in place
  }
  if (promoting) settle(device, *state);
}

// Note [The policy's capacity]
void TieredPlacement::tell_policy_of_capacity(int device, Device& state) {
  state.policy->set_capacity(state.arena->stats().device_granules +
                             usable_device_granules(device, state));
}

// Note [Promoting ahead] (policies/eviction_policy.h)
uint64_t TieredPlacement::promote_ahead(Device& state, uint64_t needed,
                                        std::vector<GranuleMove>& promotions,
                                        std::vector<policies::BlockId>& keep) {
  uint64_t more = 0;
  for (const policies::BlockId base : state.policy->promote_ahead(needed, keep)) {
    const auto block = state.arena->block_containing(base);
    if (!block || block->base != base || block->host_granules() == 0 ||
        rule_of(state.ruled, base) == RuleAction::kPreferHost)
      continue;
    promotions.push_back(promotion_of(*block));
    keep.push_back(base);
    more += promotions.back().granules;
  }
  return more;
}

// A Device, once made, lives as long as the placement: the mask's bit is set after the Device is
// in place (release), so a reader that sees the bit (acquire) sees the Device, without the lock.
template <typename Visit>
bool TieredPlacement::any_device(Visit&& visit) {
  for (uint64_t mask = with_arenas_.load(std::memory_order_acquire); mask != 0; mask &= mask - 1) {
    const int device = std::countr_zero(mask);
    if (visit(device, *devices_[static_cast<std::size_t>(device)])) return true;
  }
  return false;
}

void TieredPlacement::before_submission(uint64_t sequence, uint32_t stream,
                                        std::span<const policies::BlockId> blocks) noexcept {
  any_device([&](int device, Device& state) {
    std::array<policies::BlockId, core::SubmissionUse::kCapacity> mine;  // count says what is set
    std::size_t count = 0;
    for (const policies::BlockId base : blocks) {
      if (count < mine.size() && state.arena->block_containing(base)) mine[count++] = base;
    }
    if (count != 0) before_launch(device, sequence, stream, std::span(mine.data(), count));
    return false;
  });
}

void TieredPlacement::order_after_copies(const core::SubmissionUse& use, bool capturing) noexcept {
  const std::span<const uint64_t> bases(use.bases.data(), use.count);
  any_device([&](int, Device& state) {
    if (state.arena->order_after_copies(use.stream, bases, use.everything, capturing) !=
        CUDA_SUCCESS) {
      static constinit std::atomic<bool> said{false};
      if (!said.exchange(true))
        logging::warn(
            "tiered window: a submission could not wait for a move's copy (neither on its "
            "stream nor on the host); it may read a block before its bytes are there");
    }
    return false;
  });
}

std::optional<CUdeviceptr> TieredPlacement::block_containing(CUdeviceptr address) noexcept {
  std::optional<CUdeviceptr> found;
  any_device([&](int, Device& state) {
    if (const auto block = state.arena->block_containing(address)) found = block->base;
    return found.has_value();
  });
  return found;
}

const tiers::GranuleArena* TieredPlacement::arena_of(int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return nullptr;
  const std::lock_guard lock(devices_mutex_);
  const Device* state = devices_[static_cast<std::size_t>(device)].get();
  return state != nullptr ? state->arena : nullptr;
}

TieredStats TieredPlacement::stats() const noexcept {
  const std::lock_guard lock(stats_mutex_);
  TieredStats now = stats_;
  if (tracked_) {
    now.stream_waits = tracked_->stream_waits();
    now.device_waits = tracked_->device_waits();
  }
  return now;
}

}  // namespace vramspill::placement
