#include "play_plan.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <unordered_map>


namespace vramspill::player {
namespace {

using telemetry::TraceEvent;
using telemetry::TraceEventKind;

std::string hex(uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

// Builds the plan event by event; `number` is the event's place in the file, from 1.
class Planner {
 public:
  Planner(int device, const std::string& name) : name_(name) { plan_.device = device; }

  void add(const TraceEvent& event, size_t number) {
    number_ = number;
    event_ = &event;
    if (event.kind == TraceEventKind::kEvict || event.kind == TraceEventKind::kPromote) {
      ++plan_.moves_ignored;
      return;
    }
    // Nothing to play: a budget, a request over it, the launch counts.
    if (event.kind == TraceEventKind::kDevice || event.kind == TraceEventKind::kRefuse ||
        event.kind == TraceEventKind::kLaunches)
      return;
    if (event.device != plan_.device) {
      ++plan_.other_device_events;
      return;
    }
    switch (event.kind) {
      case TraceEventKind::kAlloc: return alloc(event);
      case TraceEventKind::kFree: return free(event);
      case TraceEventKind::kUse: return use(event);
      default: return;
    }
  }

  Plan take() { return std::move(plan_); }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw PlanError(name_ + ": event " + std::to_string(number_) + " (" +
                    std::string(telemetry::trace_kind_word(event_->kind)) + " at " +
                    std::to_string(event_->time_ns) + " ns): " + what);
  }

  void alloc(const TraceEvent& event) {
    if (event.bytes == 0) {
      ++plan_.empty_allocations;
      empty_keys_.push_back(event.key);
      return;
    }
    if (live_.contains(event.key))
      fail("allocates " + hex(event.key) + ", which is live (allocated by event " +
           std::to_string(plan_.blocks[live_.at(event.key)].event) + " and not freed)");
    if (plan_.blocks.size() == std::numeric_limits<uint32_t>::max())
      fail("more allocations than the player can hold");
    const auto block = static_cast<uint32_t>(plan_.blocks.size());
    plan_.blocks.push_back({event.key, event.bytes, number_});
    live_.emplace(event.key, block);
    plan_.actions.push_back({PlannedAction::Kind::kAlloc, block, 0, 0, 0});
  }

  void free(const TraceEvent& event) {
    const auto found = live_.find(event.key);
    if (found == live_.end()) {
      const auto empty = std::find(empty_keys_.begin(), empty_keys_.end(), event.key);
      if (empty != empty_keys_.end()) {
        empty_keys_.erase(empty);
        return;
      }
      fail("frees " + hex(event.key) + ", which no earlier alloc of device " +
           std::to_string(plan_.device) + " holds");
    }
    plan_.actions.push_back({PlannedAction::Kind::kFree, found->second, 0, 0, 0});
    live_.erase(found);
    ++plan_.frees;
  }

  void use(const TraceEvent& event) {
    const auto first = static_cast<uint32_t>(plan_.launch_blocks.size());
    for (const uint64_t base : event.bases) {
      const auto found = live_.find(base);
      if (found == live_.end())
        fail("names block " + hex(base) + ", which is not live: expected the base of an " +
             "allocation of device " + std::to_string(plan_.device) + " not yet freed");
      const auto named = plan_.launch_blocks.begin() + first;
      if (std::find(named, plan_.launch_blocks.end(), found->second) == plan_.launch_blocks.end())
        plan_.launch_blocks.push_back(found->second);
    }
    const auto count = static_cast<uint32_t>(plan_.launch_blocks.size() - first);
    plan_.actions.push_back({PlannedAction::Kind::kLaunch, 0, stream_index(event.stream), first,
                             count});
    ++plan_.launches;
  }

  uint32_t stream_index(uint64_t stream) {
    const auto found = std::find(plan_.streams.begin(), plan_.streams.end(), stream);
    if (found != plan_.streams.end())
      return static_cast<uint32_t>(found - plan_.streams.begin());
    plan_.streams.push_back(stream);
    return static_cast<uint32_t>(plan_.streams.size() - 1);
  }

  const std::string& name_;
  Plan plan_;
  std::unordered_map<uint64_t, uint32_t> live_;  // key -> block
  std::vector<uint64_t> empty_keys_;             // live allocations of 0 bytes
  size_t number_ = 0;
  const TraceEvent* event_ = nullptr;
};

}  // namespace

Plan make_plan(const telemetry::Trace& trace, int device, const std::string& name) {
  Planner planner(device, name);
  for (size_t index = 0; index < trace.events.size(); ++index)
    planner.add(trace.events[index], index + 1);
  return planner.take();
}

int first_allocating_device(const telemetry::Trace& trace) {
  for (const TraceEvent& event : trace.events)
    if (event.kind == TraceEventKind::kAlloc) return event.device;
  return 0;
}

}  // namespace vramspill::player
