#include "report_json.h"

#include <cstdio>
#include <functional>

namespace vramspill::cli {
namespace {

// The tier's name in the JSON, which report_page.js picks its colour by.
const char* tier_id(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kTieredDevice:
      return "tiered-device";
    case Tier::kTieredHost:
      return "tiered-host";
    case Tier::kSpillHost:
      return "spill-host";
    case Tier::kSpillVmmHost:
      return "spill-vmm-host";
    case Tier::kSpillManaged:
      return "spill-managed";
  }
  return "?";
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

// Writes [f(0), f(1), ...] for `count` items.
template <typename Item>
void write_array(std::ostream& out, std::size_t count, const std::function<Item(std::size_t)>& f) {
  out << '[';
  for (std::size_t i = 0; i < count; ++i) out << (i == 0 ? "" : ",") << f(i);
  out << ']';
}

void write_tiers(const DeviceReport& device, std::ostream& out) {
  out << "\"tiers\":[";
  bool first = true;
  for (std::size_t tier = 0; tier < kTierCount; ++tier) {
    if (device.peak_bytes[tier] == 0) continue;  // never held bytes: no empty band in the chart
    out << (first ? "" : ",") << "{\"id\":" << script_json_string(tier_id(Tier(tier)))
        << ",\"label\":" << script_json_string(tier_label(Tier(tier))) << ",\"values\":";
    write_array<uint64_t>(out, device.bytes.size(),
                          [&](std::size_t i) { return device.bytes[i].bytes[tier]; });
    out << '}';
    first = false;
  }
  out << ']';
}

void write_activity(const std::vector<ActivityBucket>& buckets, std::ostream& out) {
  const std::size_t count = buckets.size();
  out << "\"activity\":{\"start\":";
  write_array<std::string>(out, count, [&](std::size_t i) { return number(buckets[i].start_s); });
  out << ",\"evicted\":";
  write_array<uint64_t>(out, count, [&](std::size_t i) { return buckets[i].evicted_bytes; });
  out << ",\"promoted\":";
  write_array<uint64_t>(out, count, [&](std::size_t i) { return buckets[i].promoted_bytes; });
  out << ",\"refusals\":";
  write_array<uint64_t>(out, count, [&](std::size_t i) { return buckets[i].refusals; });
  out << ",\"spills\":";
  write_array<uint64_t>(out, count, [&](std::size_t i) { return buckets[i].spills; });
  out << '}';
}

void write_device(const DeviceReport& device, std::ostream& out) {
  out << "{\"device\":" << device.device << ",\"total\":" << device.total_bytes
      << ",\"limit\":" << device.limit_bytes << ",\"bucket_s\":" << number(device.bucket_s)
      << ",\"charts\":";
  const std::vector<std::string_view> charts = charts_of(device);
  write_array<std::string>(out, charts.size(),
                           [&](std::size_t i) { return script_json_string(charts[i]); });
  out << ",\"samples\":" << device.samples << ",\"times\":";
  write_array<std::string>(out, device.bytes.size(),
                           [&](std::size_t i) { return number(device.bytes[i].time_s); });
  out << ',';
  write_tiers(device, out);
  out << ',';
  write_activity(device.activity, out);
  out << '}';
}

}  // namespace

std::vector<std::string_view> charts_of(const DeviceReport& device) {
  std::vector<std::string_view> charts;
  if (!device.bytes.empty()) charts.emplace_back("bytes");
  if (device.evictions != 0 || device.promotions != 0) charts.emplace_back("moved");
  if (device.refusals != 0 || device.spills != 0) charts.emplace_back("events");
  return charts;
}

std::string script_json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || c == '<' || c == '>' || c == '&') {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(byte));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void write_report_json(const JobReport& report, std::ostream& out) {
  out << "{\"end_s\":" << number(report.duration_s) << ",\"devices\":[";
  for (std::size_t i = 0; i < report.devices.size(); ++i) {
    if (i != 0) out << ',';
    write_device(report.devices[i], out);
  }
  out << "]}";
}

}  // namespace vramspill::cli
