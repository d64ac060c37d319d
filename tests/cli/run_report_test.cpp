// What `vramspill report` shows of a trace (tools/cli/run_report.h): bytes per tier over time
// as tiered blocks move and allocations spill, the summary's figures, the largest allocations,
// downsampling that keeps the peaks, and what a damaged trace leaves out.
#include "run_report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace vramspill::cli {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

JobReport report_of(const std::string& events, const ReportLimits& limits = {}) {
  std::istringstream text("# vramspill trace 1\n# pid 7\n# start_unix_ns 1000\n# command demo\n" +
                          events);
  return build_report(telemetry::parse_trace(text, "test.trace"), limits);
}

ReportLimits limits_with(std::size_t ReportLimits::*limit, std::size_t value) {
  ReportLimits limits;
  limits.*limit = value;
  return limits;
}

uint64_t at(const BytesPoint& point, Tier tier) { return point.bytes[tier_index(tier)]; }

// A tiered block of 16 MiB with 4 MiB placed on the host at once, a block on the device, a
// refusal and its spill to the host pool, a promotion and an eviction, then the frees.
constexpr const char* kMixedEvents =
    "0 device 0 1073741824 33554432\n"
    "1000 alloc 0 tiered 0x1000 16777216\n"
    "1000 evict 0 0x1000 4194304\n"
    "2000 alloc 0 cuMemAlloc 0x900000 8388608\n"
    "3000 refuse 0 cuMemAlloc 33554432\n"
    "3000 alloc 0 spill-host 0x7000 33554432\n"
    "4000 promote 0 0x1000 4194304\n"
    "5000 evict 0 0x1000 8388608\n"
    "5500 use 0 3 0x1000\n"
    "6000 free 0 tiered 0x1000 16777216\n"
    "7000 free 0 spill-host 0x7000 33554432\n"
    "8000 free 0 cuMemAlloc 0x900000 8388608\n";
const std::string kMixedJob = std::string(kMixedEvents) + "# end 12 events\n";

TEST(RunReport, TieredBytesMoveBetweenDeviceAndHostAndSpillsHaveTheirTier) {
  const JobReport report = report_of(kMixedJob);
  EXPECT_EQ(report.command, "demo");
  EXPECT_EQ(report.pid, 7u);
  EXPECT_TRUE(report.complete);
  EXPECT_DOUBLE_EQ(report.duration_s, 8e-6);
  ASSERT_EQ(report.devices.size(), 1u);
  const DeviceReport& device = report.devices[0];
  EXPECT_EQ(device.total_bytes, 1024 * kMiB);
  EXPECT_EQ(device.limit_bytes, 32 * kMiB);

  // The start, one point per event that changes memory, and the end.
  ASSERT_EQ(device.bytes.size(), 11u);
  const BytesPoint& placed = device.bytes[2];  // after the evict that follows the alloc
  EXPECT_DOUBLE_EQ(placed.time_s, 1e-6);
  EXPECT_EQ(at(placed, Tier::kTieredDevice), 12 * kMiB);
  EXPECT_EQ(at(placed, Tier::kTieredHost), 4 * kMiB);
  const BytesPoint& spilled = device.bytes[4];
  EXPECT_EQ(at(spilled, Tier::kSpillHost), 32 * kMiB);
  EXPECT_EQ(at(spilled, Tier::kDevice), 8 * kMiB);
  const BytesPoint& promoted = device.bytes[5];
  EXPECT_EQ(at(promoted, Tier::kTieredDevice), 16 * kMiB);
  EXPECT_EQ(at(promoted, Tier::kTieredHost), 0u);
  const BytesPoint& evicted = device.bytes[6];
  EXPECT_EQ(at(evicted, Tier::kTieredDevice), 8 * kMiB);
  EXPECT_EQ(at(evicted, Tier::kTieredHost), 8 * kMiB);
  EXPECT_EQ(device.bytes[7].bytes, (TierBytes{8 * kMiB, 0, 0, 32 * kMiB, 0, 0}));  // freed
  EXPECT_EQ(device.bytes.back().bytes, TierBytes{});
  EXPECT_DOUBLE_EQ(device.bytes.back().time_s, 8e-6);

  EXPECT_EQ(device.peak_bytes, (TierBytes{8 * kMiB, 16 * kMiB, 8 * kMiB, 32 * kMiB, 0, 0}));
  EXPECT_EQ(device.peak_on_device_bytes, 24 * kMiB);  // 8 MiB + the block promoted whole
  EXPECT_EQ(device.allocations, 3u);
  EXPECT_EQ(device.spills, 1u);
  EXPECT_EQ(device.spilled_bytes, 32 * kMiB);
  EXPECT_EQ(device.refusals, 1u);
  EXPECT_EQ(device.evictions, 2u);
  EXPECT_EQ(device.evicted_bytes, 12 * kMiB);
  EXPECT_EQ(device.promotions, 1u);
  EXPECT_EQ(device.promoted_bytes, 4 * kMiB);
  EXPECT_EQ(report.left_out_events, 0u);
}

TEST(RunReport, ActivityBucketsCountWhatHappenedWhen) {
  const JobReport report = report_of(kMixedJob, limits_with(&ReportLimits::activity_buckets, 8));
  const DeviceReport& device = report.devices[0];
  ASSERT_EQ(device.activity.size(), 8u);
  EXPECT_DOUBLE_EQ(device.bucket_s, 1e-6);
  EXPECT_DOUBLE_EQ(device.activity[3].start_s, 3e-6);
  EXPECT_EQ(device.activity[1].evicted_bytes, 4 * kMiB);
  EXPECT_EQ(device.activity[3].refusals, 1u);
  EXPECT_EQ(device.activity[3].spills, 1u);
  EXPECT_EQ(device.activity[4].promoted_bytes, 4 * kMiB);
  EXPECT_EQ(device.activity[5].evicted_bytes, 8 * kMiB);
  EXPECT_EQ(device.activity[0].evicted_bytes + device.activity[2].refusals, 0u);
}

TEST(RunReport, LargestAllocationsComeFirstWithTheirLifetimes) {
  const JobReport report = report_of(
      std::string(kMixedEvents) + "9000 alloc 0 cuMemAlloc 0x900000 8388608\n",  // no '# end'
      limits_with(&ReportLimits::largest, 3));
  EXPECT_FALSE(report.complete);
  ASSERT_EQ(report.largest.size(), 3u);
  EXPECT_EQ(report.largest[0].route, core::Route::kSpillHost);
  EXPECT_DOUBLE_EQ(report.largest[0].allocated_s, 3e-6);
  EXPECT_DOUBLE_EQ(report.largest[0].freed_s.value(), 7e-6);
  EXPECT_EQ(report.largest[1].route, core::Route::kTiered);
  // Two of 8 MiB at one address: the earlier first, freed; the later live at the end.
  EXPECT_EQ(report.largest[2].key, 0x900000u);
  EXPECT_DOUBLE_EQ(report.largest[2].allocated_s, 2e-6);
  EXPECT_TRUE(report.largest[2].freed_s.has_value());
}

TEST(RunReport, DownsamplingKeepsEachBucketsPeak) {
  // A 1 MiB block, then a spike of 100 bytes that lasts 1 ns, then 5 bytes in the second half.
  const std::string events =
      "0 alloc 0 cuMemAlloc 0x1000 1048576\n"
      "10 alloc 0 cuMemAlloc 0x2000 100\n"
      "11 free 0 cuMemAlloc 0x2000 100\n"
      "50 alloc 0 cuMemAlloc 0x3000 5\n"
      "100 free 0 cuMemAlloc 0x3000 5\n";
  const JobReport report = report_of(events, limits_with(&ReportLimits::max_points, 3));
  const DeviceReport& device = report.devices[0];
  ASSERT_EQ(device.bytes.size(), 3u);  // two buckets and the end
  EXPECT_DOUBLE_EQ(device.bytes[0].time_s, 0);
  EXPECT_EQ(at(device.bytes[0], Tier::kDevice), kMiB + 100);
  EXPECT_DOUBLE_EQ(device.bytes[1].time_s, 50e-9);
  EXPECT_EQ(at(device.bytes[1], Tier::kDevice), kMiB + 5);
  EXPECT_DOUBLE_EQ(device.bytes[2].time_s, 100e-9);
  EXPECT_EQ(at(device.bytes[2], Tier::kDevice), kMiB);
  EXPECT_EQ(device.peak_bytes[tier_index(Tier::kDevice)], kMiB + 100);

  // Without a limit that bites, every change is a point.
  EXPECT_EQ(report_of(events).devices[0].bytes.size(), 7u);
}

// Note [Downsampling keeps the peaks]: two tiers that peak at different instants of one bucket
// are drawn from the instant of the largest total, never stacked peak on peak into a total the
// job never had.
TEST(RunReport, DownsamplingStacksOnlyTotalsTheJobHad) {
  const std::string events =
      "0 alloc 0 cuMemAlloc 0x1000 300\n"
      "2 free 0 cuMemAlloc 0x1000 300\n"
      "3 alloc 0 spill-host 0x9000 200\n"
      "100 free 0 spill-host 0x9000 200\n";
  const JobReport report = report_of(events, limits_with(&ReportLimits::max_points, 3));
  const DeviceReport& device = report.devices[0];
  ASSERT_EQ(device.bytes.size(), 3u);
  EXPECT_EQ(at(device.bytes[0], Tier::kDevice), 300u);  // the fuller instant of the bucket
  EXPECT_EQ(at(device.bytes[0], Tier::kSpillHost), 0u);
  EXPECT_EQ(device.samples, 5u);  // the empty start, then each event
}

TEST(RunReport, DamagedTracesEventsAreLeftOutAndCounted) {
  const JobReport report = report_of(
      "1 alloc 0 cuMemAlloc 0x1000 4096\n"
      "2 alloc 0 cuMemAlloc 0x1000 4096\n"  // a key that is live
      "3 free 0 cuMemAlloc 0x5000 4096\n"   // never allocated
      "4 evict 0 0x1000 4096\n"             // not a tiered block
      "5 promote 0 0x8000 4096\n"           // no block there
      "6 alloc 0 tiered 0x8000 4096\n"
      "7 evict 0 0x8000 65536\n");  // more than the block: what it has moves
  EXPECT_EQ(report.left_out_events, 4u);
  const DeviceReport& device = report.devices[0];
  EXPECT_EQ(device.allocations, 2u);
  EXPECT_EQ(device.bytes.back().bytes, (TierBytes{4096, 0, 4096, 0, 0, 0}));
  EXPECT_EQ(device.evicted_bytes, 4096u);
}

TEST(RunReport, EachDeviceHasItsOwnSeriesByOrdinal) {
  const JobReport report = report_of(
      "1 alloc 2 spill-managed 0x1000 4096\n"
      "2 alloc 0 spill-vmm-host 0x1000 8192\n");
  ASSERT_EQ(report.devices.size(), 2u);
  EXPECT_EQ(report.devices[0].device, 0);
  EXPECT_EQ(report.devices[0].peak_bytes[tier_index(Tier::kSpillVmmHost)], 8192u);
  EXPECT_EQ(report.devices[1].device, 2);
  EXPECT_EQ(report.devices[1].peak_bytes[tier_index(Tier::kSpillManaged)], 4096u);
  EXPECT_EQ(report.devices[1].peak_on_device_bytes, 0u);
}

}  // namespace
}  // namespace vramspill::cli
