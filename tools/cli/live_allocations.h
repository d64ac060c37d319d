// The allocations a trace shows live, as the tools that read one (export, report, replay) walk
// it in time order: found again by what their frees name, with what does not fit left out and
// counted, never trusted.
//
// Note [Allocations a trace shows live]
// An allocation is live from its alloc to the free that names the same device, key and kind of
// key (device pointers, VMM handles and CUarrays are apart: core::KeySpace); a tiered block's
// evicts and promotes name it by its base. The trace starts with the process, so no allocation
// predates it: a free of a key that is not live, or an alloc of one that still is, means a
// damaged trace. Such an event is left out and counted, the first allocation staying live, so
// that no tool sees a block freed twice or two blocks at one address, and every tool says the
// same of it (warn_about_left_out() in trace_input.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "core/route.h"
#include "trace_reader.h"

namespace vramspill::cli {

// What a damaged trace made a tool leave out (Note [Allocations a trace shows live]).
struct LeftOut {
  uint64_t unmatched_frees = 0;       // frees of a key that was not live
  uint64_t repeated_allocations = 0;  // allocs of a key that was live already
};

// The live allocations, each with what a tool keeps of it (`Value`).
template <typename Value>
class LiveAllocations {
 public:
  using Key = std::tuple<int, core::KeySpace, uint64_t>;  // device, kind of key, key

  // `alloc`'s allocation, live from now with `value`; null, and counted, when its key is live
  // already.
  Value* allocate(const telemetry::TraceEvent& alloc, Value value) {
    const auto [at, added] = live_.emplace(key_of(alloc), std::move(value));
    if (added) return &at->second;
    ++left_out_.repeated_allocations;
    return nullptr;
  }

  // The allocation `free` names, no longer live; nullopt, and counted, when none is.
  std::optional<Value> free(const telemetry::TraceEvent& free) {
    const auto found = live_.find(key_of(free));
    if (found == live_.end()) {
      ++left_out_.unmatched_frees;
      return std::nullopt;
    }
    Value value = std::move(found->second);
    live_.erase(found);
    return value;
  }

  // The live allocation at device pointer `base` on `device` (a tiered block, as evicts,
  // promotes and uses name it), or null.
  Value* at_base(int device, uint64_t base) {
    const auto found = live_.find(Key{device, core::KeySpace::kPointer, base});
    return found == live_.end() ? nullptr : &found->second;
  }

  // Those live now, by device, kind of key and key.
  const std::map<Key, Value>& live() const { return live_; }
  const LeftOut& left_out() const { return left_out_; }

 private:
  static Key key_of(const telemetry::TraceEvent& event) {
    return {event.device, core::key_space(event.route), event.key};
  }

  std::map<Key, Value> live_;
  LeftOut left_out_;
};

}  // namespace vramspill::cli
