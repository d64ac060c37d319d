#include "run_report.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "live_allocations.h"

namespace vramspill::cli {
namespace {

using telemetry::Trace;
using telemetry::TraceEvent;
using telemetry::TraceEventKind;

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

// The tier of an allocation that is not a tiered block.
Tier route_tier(core::Route route) {
  switch (route) {
    case core::Route::kSpillHost:
      return Tier::kSpillHost;
    case core::Route::kSpillVmmHost:
      return Tier::kSpillVmmHost;
    case core::Route::kSpillManaged:
      return Tier::kSpillManaged;
    default:
      return Tier::kDevice;
  }
}

// The bucket of `count` equal ones over [0, end_ns] that holds `time_ns`.
std::size_t bucket_of(uint64_t time_ns, uint64_t end_ns, std::size_t count) {
  if (end_ns == 0) return 0;
  const auto index = static_cast<std::size_t>(
      static_cast<double>(time_ns) / static_cast<double>(end_ns) * static_cast<double>(count));
  return std::min(index, count - 1);
}

struct Sample {
  uint64_t time_ns = 0;
  TierBytes bytes{};
};

// The series' points (Note [Downsampling keeps the peaks]): every sample when they fit, else
// each bucket's instant of the largest total; then the state at the end, so the last step is
// drawn.
std::vector<BytesPoint> series_points(const std::vector<Sample>& samples, uint64_t end_ns,
                                      std::size_t max_points) {
  std::vector<BytesPoint> points;
  if (samples.size() < max_points) {
    for (const Sample& sample : samples) points.push_back({seconds(sample.time_ns), sample.bytes});
  } else {
    const std::size_t buckets = std::max<std::size_t>(max_points - 1, 1);
    const double bucket_s = seconds(end_ns) / static_cast<double>(buckets);
    const auto total = [](const TierBytes& bytes) {
      return std::accumulate(bytes.begin(), bytes.end(), uint64_t{0});
    };
    TierBytes carried{};
    std::size_t next = 0;
    for (std::size_t bucket = 0; bucket < buckets; ++bucket) {
      TierBytes fullest = carried;
      for (; next < samples.size() && bucket_of(samples[next].time_ns, end_ns, buckets) == bucket;
           ++next) {
        carried = samples[next].bytes;
        if (total(carried) > total(fullest)) fullest = carried;
      }
      points.push_back({static_cast<double>(bucket) * bucket_s, fullest});
    }
  }
  points.push_back({seconds(end_ns), samples.back().bytes});
  return points;
}

// What the report keeps of a live allocation (Note [Allocations a trace shows live]).
struct Live {
  uint64_t bytes = 0;
  core::Route route = core::Route::kMemAlloc;
  uint64_t on_host = 0;        // a tiered block's evicted bytes
  std::size_t allocation = 0;  // index in Builder::allocations_
};

struct DeviceState {
  DeviceReport report;
  TierBytes current{};
  std::vector<Sample> samples{Sample{}};  // starts empty at time 0
};

class Builder {
 public:
  Builder(const Trace& trace, const ReportLimits& limits) : trace_(trace), limits_(limits) {}

  JobReport build() {
    std::vector<std::size_t> order(trace_.events.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return trace_.events[a].time_ns < trace_.events[b].time_ns;
    });
    if (!order.empty()) end_ns_ = trace_.events[order.back()].time_ns;
    for (const std::size_t index : order) add(trace_.events[index]);

    report_.command = trace_.command;
    report_.pid = trace_.pid;
    report_.start_unix_ns = trace_.start_unix_ns;
    report_.duration_s = seconds(end_ns_);
    report_.complete = trace_.complete;
    for (auto& [device, state] : devices_) {
      state.report.bytes = series_points(state.samples, end_ns_, limits_.max_points);
      state.report.samples = state.samples.size();
      report_.devices.push_back(std::move(state.report));
    }
    report_.allocations = allocations_.size();
    report_.largest = largest();
    report_.left_out_events = live_.left_out().unmatched_frees +
                              live_.left_out().repeated_allocations + unmatched_moves_;
    return std::move(report_);
  }

 private:
  DeviceState& device(int ordinal) {
    auto [found, added] = devices_.try_emplace(ordinal);
    if (added) {
      DeviceReport& report = found->second.report;
      report.device = ordinal;
      const std::size_t buckets = std::max<std::size_t>(limits_.activity_buckets, 1);
      report.bucket_s = seconds(end_ns_) / static_cast<double>(buckets);
      for (std::size_t bucket = 0; bucket < buckets; ++bucket) {
        ActivityBucket& added_bucket = report.activity.emplace_back();
        added_bucket.start_s = static_cast<double>(bucket) * report.bucket_s;
      }
    }
    return found->second;
  }

  ActivityBucket& activity(DeviceState& state, uint64_t time_ns) {
    std::vector<ActivityBucket>& buckets = state.report.activity;
    return buckets[bucket_of(time_ns, end_ns_, buckets.size())];
  }

  void add(const TraceEvent& event) {
    if (event.kind == TraceEventKind::kLaunches) {  // the process's, not a device's
      report_.launches = event;
      return;
    }
    DeviceState& state = device(event.device);
    DeviceReport& report = state.report;
    switch (event.kind) {
      case TraceEventKind::kDevice:
        report.total_bytes = event.bytes;
        report.limit_bytes = event.limit_bytes;
        return;
      case TraceEventKind::kAlloc:
        allocate(state, event);
        break;
      case TraceEventKind::kFree:
        free(state, event);
        break;
      case TraceEventKind::kRefuse:
        ++report.refusals;
        ++activity(state, event.time_ns).refusals;
        return;
      case TraceEventKind::kEvict:
      case TraceEventKind::kPromote:
        move(state, event);
        break;
      case TraceEventKind::kUse:  // which blocks a launch touches: no memory changes hands
      case TraceEventKind::kLaunches:  // taken above
        return;
    }
    state.samples.push_back({event.time_ns, state.current});
    TierBytes& peak = report.peak_bytes;
    for (std::size_t tier = 0; tier < kTierCount; ++tier) {
      peak[tier] = std::max(peak[tier], state.current[tier]);
    }
    report.peak_on_device_bytes =
        std::max(report.peak_on_device_bytes, state.current[tier_index(Tier::kDevice)] +
                                                  state.current[tier_index(Tier::kTieredDevice)]);
  }

  void allocate(DeviceState& state, const TraceEvent& event) {
    const Live live{.bytes = event.bytes, .route = event.route, .allocation = allocations_.size()};
    if (live_.allocate(event, live) == nullptr) return;
    allocations_.push_back({.device = event.device,
                            .route = event.route,
                            .key = event.key,
                            .bytes = event.bytes,
                            .allocated_s = seconds(event.time_ns),
                            .freed_s = std::nullopt});
    DeviceReport& report = state.report;
    ++report.allocations;
    if (core::is_spill_route(event.route)) {
      ++report.spills;
      report.spilled_bytes += event.bytes;
      ++activity(state, event.time_ns).spills;
    }
    const Tier tier =
        event.route == core::Route::kTiered ? Tier::kTieredDevice : route_tier(event.route);
    state.current[tier_index(tier)] += event.bytes;
  }

  void free(DeviceState& state, const TraceEvent& event) {
    const std::optional<Live> live = live_.free(event);
    if (!live) return;
    if (live->route == core::Route::kTiered) {
      state.current[tier_index(Tier::kTieredDevice)] -= live->bytes - live->on_host;
      state.current[tier_index(Tier::kTieredHost)] -= live->on_host;
    } else {
      state.current[tier_index(route_tier(live->route))] -= live->bytes;
    }
    allocations_[live->allocation].freed_s = seconds(event.time_ns);
  }

  // An evict or a promote: bytes of a tiered block change sides (at most what is on that side,
  // so that a damaged trace cannot make a tier negative).
  void move(DeviceState& state, const TraceEvent& event) {
    Live* const block = live_.at_base(event.device, event.key);
    if (block == nullptr || block->route != core::Route::kTiered) {
      ++unmatched_moves_;
      return;
    }
    Live& live = *block;
    DeviceReport& report = state.report;
    ActivityBucket& bucket = activity(state, event.time_ns);
    uint64_t& on_device = state.current[tier_index(Tier::kTieredDevice)];
    uint64_t& on_host = state.current[tier_index(Tier::kTieredHost)];
    if (event.kind == TraceEventKind::kEvict) {
      const uint64_t moved = std::min(event.bytes, live.bytes - live.on_host);
      live.on_host += moved;
      on_device -= moved;
      on_host += moved;
      ++report.evictions;
      report.evicted_bytes += moved;
      bucket.evicted_bytes += moved;
    } else {
      const uint64_t moved = std::min(event.bytes, live.on_host);
      live.on_host -= moved;
      on_host -= moved;
      on_device += moved;
      ++report.promotions;
      report.promoted_bytes += moved;
      bucket.promoted_bytes += moved;
    }
  }

  std::vector<LargeAllocation> largest() {
    const std::size_t count = std::min(limits_.largest, allocations_.size());
    const auto larger = [](const LargeAllocation& a, const LargeAllocation& b) {
      return std::tie(b.bytes, a.allocated_s, a.device, a.key) <
             std::tie(a.bytes, b.allocated_s, b.device, b.key);
    };
    std::partial_sort(allocations_.begin(), allocations_.begin() + static_cast<long>(count),
                      allocations_.end(), larger);
    allocations_.resize(count);
    return std::move(allocations_);
  }

  const Trace& trace_;
  const ReportLimits limits_;
  uint64_t end_ns_ = 0;
  std::map<int, DeviceState> devices_;
  LiveAllocations<Live> live_;
  uint64_t unmatched_moves_ = 0;  // evicts and promotes of no live tiered block
  std::vector<LargeAllocation> allocations_;  // in time order until largest() sorts them
  JobReport report_;
};

}  // namespace

JobReport build_report(const Trace& trace, const ReportLimits& limits) {
  return Builder(trace, limits).build();
}

const char* tier_label(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "on the device (driver routes)";
    case Tier::kTieredDevice:
      return "tiered blocks on the device";
    case Tier::kTieredHost:
      return "tiered blocks on the host";
    case Tier::kSpillHost:
      return "spilled to the host pool";
    case Tier::kSpillVmmHost:
      return "spilled to host VMM memory";
    case Tier::kSpillManaged:
      return "spilled to managed memory";
  }
  return "?";
}

}  // namespace vramspill::cli
