#include "trace_replay.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "policies/belady.h"
#include "policies/eviction_policy.h"
#include "policies/registry.h"

namespace vramspill::cli {
namespace {

using telemetry::TraceEvent;
using telemetry::TraceEventKind;

constexpr uint64_t kGranuleBytes = uint64_t{2} << 20;

// Rounded up, without the sum that overflows near UINT64_MAX.
uint64_t granules_for(uint64_t bytes) {
  return bytes / kGranuleBytes + (bytes % kGranuleBytes != 0 ? 1 : 0);
}

// The trace's events, in time order (threads interleave in the file; trace_format.h).
std::vector<const TraceEvent*> in_time_order(const telemetry::Trace& trace) {
  std::vector<const TraceEvent*> events;
  events.reserve(trace.events.size());
  for (const TraceEvent& event : trace.events) events.push_back(&event);
  std::stable_sort(events.begin(), events.end(), [](const TraceEvent* a, const TraceEvent* b) {
    return a->time_ns < b->time_ns;
  });
  return events;
}

// One policy over the model of Note [The replay's model].
class Simulation {
 public:
  Simulation(const ReplayInput& input, std::string_view name) : capacity_(input.budget_granules) {
    policies::MadePolicy made = policies::make_policy(
        name, {.capacity_granules = capacity_, .invariant_mode = policies::InvariantMode::kAbort});
    if (!made.policy) throw std::invalid_argument(made.error);
    policy_ = std::move(made.policy);
    result_.policy = std::string(name);
  }

  ReplayResult run(const ReplayInput& input) {
    for (const ReplayStep& step : input.steps) {
      switch (step.kind) {
        case ReplayStep::Kind::kAlloc:
          allocate(step.blocks.front(), step.granules);
          break;
        case ReplayStep::Kind::kFree:
          free(step.blocks.front());
          break;
        case ReplayStep::Kind::kUse:
          use(static_cast<uint32_t>(step.stream), step.blocks);
          break;
      }
    }
    return result_;
  }

 private:
  struct Block {
    uint64_t granules = 0;
    uint64_t on_device = 0;
  };

  uint64_t room() const { return capacity_ - std::min(capacity_, on_device_); }

  void allocate(uint64_t id, uint64_t granules) {
    if (room() < granules && make_room(granules - room(), {})) ++result_.windows;
    const uint64_t placed = std::min(granules, room());
    policy_->allocated(id, granules, /*on_device=*/false);
    if (placed != 0) policy_->moved(id, placed);
    blocks_[id] = {granules, placed};
    on_device_ += placed;
    result_.placed_granules += placed;
  }

  void free(uint64_t id) {
    const auto found = blocks_.find(id);
    on_device_ -= found->second.on_device;
    blocks_.erase(found);
    policy_->freed(id);
  }

  void use(uint32_t stream, const std::vector<uint64_t>& launch) {
    policy_->used(++sequence_, stream, launch);
    std::vector<uint64_t> promotions;
    uint64_t needed = 0;
    for (const uint64_t id : launch) {
      const uint64_t on_host = host_granules(id);
      if (on_host == 0 || std::find(promotions.begin(), promotions.end(), id) != promotions.end())
        continue;
      if (!policy_->should_promote(id)) {
        touched_in_place(on_host);
        continue;
      }
      promotions.push_back(id);
      needed += on_host;
    }
    if (promotions.empty()) return;
    const std::size_t own = promotions.size();
    std::vector<uint64_t> keep = launch;
    for (const uint64_t id : policy_->promote_ahead(needed, launch)) {
      promotions.push_back(id);
      keep.push_back(id);
      needed += host_granules(id);
    }
    // The victims are chosen first, and what would not fit even with all of them gone stays
    // out (the blocks named ahead first, then the launch's own, touched in place), as in the
    // shim.
    policies::Victims victims;
    uint64_t evictable = 0;
    if (room() < needed) {
      victims = policy_->choose_victims(needed - room(), keep, /*in_part=*/true);
      for (const uint64_t id : victims.blocks) evictable += blocks_.at(id).on_device;
    }
    while (!promotions.empty() && room() + evictable < needed) {
      needed -= host_granules(promotions.back());
      if (promotions.size() <= own) touched_in_place(host_granules(promotions.back()));
      promotions.pop_back();
    }
    if (promotions.empty()) return;
    if (room() < needed) evict(victims, needed - room());
    ++result_.windows;  // one for the evictions and the promotions, as in the shim
    result_.late_promotions += std::min(own, promotions.size());
    result_.ahead_promotions += promotions.size() - std::min(own, promotions.size());
    for (const uint64_t id : promotions) {
      Block& block = blocks_.at(id);
      result_.promoted_granules += block.granules - block.on_device;
      ++result_.moves;
      on_device_ += block.granules - block.on_device;
      block.on_device = block.granules;
      policy_->moved(id, block.granules);
    }
  }

  uint64_t host_granules(uint64_t id) const {
    const Block& block = blocks_.at(id);
    return block.granules - block.on_device;
  }

  // Whether anything was evicted.
  bool make_room(uint64_t granules, std::span<const uint64_t> keep) {
    return evict(policy_->choose_victims(granules, keep, /*in_part=*/true), granules);
  }

  // Evicts `victims`, in order, until they have given up `granules`, the last only in part if
  // the policy says so (Note [Evicting part of a block] in policies/eviction_policy.h); whether
  // any was.
  bool evict(const policies::Victims& victims, uint64_t granules) {
    uint64_t evicted = 0;
    for (const uint64_t id : victims.blocks) {
      if (evicted >= granules) break;
      Block& block = blocks_.at(id);
      const uint64_t given =
          victims.partial_last ? std::min(block.on_device, granules - evicted) : block.on_device;
      evicted += given;
      result_.evicted_granules += given;
      ++result_.moves;
      on_device_ -= given;
      block.on_device -= given;
      policy_->moved(id, block.on_device);
    }
    return evicted != 0;
  }

  void touched_in_place(uint64_t on_host) {
    ++result_.in_place_uses;
    result_.in_place_granules += on_host;
  }

  uint64_t capacity_;
  std::unique_ptr<policies::EvictionPolicy> policy_;
  std::unordered_map<uint64_t, Block> blocks_;
  uint64_t on_device_ = 0;
  uint64_t sequence_ = 0;
  ReplayResult result_;
};

// A tiered block's granules; throws for one of no bytes, which the policies cannot hold.
uint64_t block_granules(const TraceEvent& alloc) {
  if (alloc.bytes == 0) {
    throw std::runtime_error("the tiered block allocated at " + std::to_string(alloc.time_ns) +
                             " ns has no bytes");
  }
  return granules_for(alloc.bytes);
}

}  // namespace

ReplayInput replay_input(const telemetry::Trace& trace, int device, uint64_t budget_bytes) {
  ReplayInput input;
  input.device = device;
  uint64_t limit = 0;
  // Block ids are allocation numbers: a base the driver hands out again is a new block.
  LiveAllocations<uint64_t> live;
  for (const TraceEvent* event : in_time_order(trace)) {
    if (event->device != device) continue;
    switch (event->kind) {
      case TraceEventKind::kDevice:
        limit = event->limit_bytes;
        break;
      case TraceEventKind::kAlloc:
        if (event->route != core::Route::kTiered) break;
        if (live.allocate(*event, input.blocks) == nullptr) break;
        input.steps.push_back({.kind = ReplayStep::Kind::kAlloc,
                               .blocks = {input.blocks},
                               .granules = block_granules(*event)});
        ++input.blocks;
        input.block_bytes += event->bytes;
        break;
      case TraceEventKind::kFree:
        if (event->route != core::Route::kTiered) break;
        if (const std::optional<uint64_t> block = live.free(*event)) {
          input.steps.push_back(
              {.kind = ReplayStep::Kind::kFree, .blocks = {*block}, .granules = 0});
        }
        break;
      case TraceEventKind::kUse: {
        ReplayStep step{.kind = ReplayStep::Kind::kUse, .stream = event->stream, .blocks = {}};
        for (const uint64_t base : event->bases) {
          if (const uint64_t* block = live.at_base(device, base)) step.blocks.push_back(*block);
        }
        if (step.blocks.empty()) break;
        input.steps.push_back(std::move(step));
        ++input.submissions;
        break;
      }
      case TraceEventKind::kEvict:
        input.recorded_evicted_bytes += event->bytes;
        break;
      case TraceEventKind::kPromote:
        input.recorded_promoted_bytes += event->bytes;
        break;
      case TraceEventKind::kRefuse:
      case TraceEventKind::kLaunches:
        break;
    }
  }
  input.left_out = live.left_out();
  if (input.blocks == 0) {
    throw std::runtime_error("no tiered block on device " + std::to_string(device) +
                             ": record the job in tiered mode ([spill] mode = \"tiered\")");
  }
  const uint64_t budget = budget_bytes != 0 ? budget_bytes : limit;
  if (budget == 0) {
    throw std::runtime_error("the trace gives no budget for device " + std::to_string(device) +
                             ": name one with --budget");
  }
  input.budget_granules = budget / kGranuleBytes;
  return input;
}

ReplayResult replay(const ReplayInput& input, std::string_view policy) {
  return Simulation(input, policy).run(input);
}

uint64_t optimal_fetched_granules(const ReplayInput& input) {
  // Every granule of a block is a unit of its own: block id and granule index in one number.
  std::unordered_map<uint64_t, uint64_t> granules;  // block id -> granules
  std::vector<policies::BlockId> uses;
  const auto touch = [&](uint64_t id) {
    for (uint64_t granule = 0; granule < granules.at(id); ++granule)
      uses.push_back(id << 24 | granule);
  };
  for (const ReplayStep& step : input.steps) {
    if (step.kind == ReplayStep::Kind::kAlloc) {
      granules[step.blocks.front()] = std::min<uint64_t>(step.granules, uint64_t{1} << 24);
      touch(step.blocks.front());
    } else if (step.kind == ReplayStep::Kind::kUse) {
      std::vector<uint64_t> distinct = step.blocks;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      for (const uint64_t id : distinct) touch(id);
    }
  }
  return policies::belady_misses(uses, input.budget_granules);
}

}  // namespace vramspill::cli
