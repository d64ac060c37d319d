#include "core/config.h"

#include <cstdlib>
#include <string_view>

#include "core/device_attributes.h"
#include "core/error_names.h"
#include "util/sizes.h"

namespace simcuda {
namespace {

constexpr int kMaxDevices = 16;

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

std::string bad_value(std::string_view variable, std::string_view value, std::string_view expected) {
  return std::string(variable) + "='" + std::string(value) + "': expected " + std::string(expected);
}

std::optional<int64_t> parse_integer(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const std::string owned(text);
  char* end = nullptr;
  const long long value = std::strtoll(owned.c_str(), &end, 0);
  if (end != owned.c_str() + owned.size()) return std::nullopt;
  return value;
}

// "cuMemAlloc_v2@3=CUDA_ERROR_OUT_OF_MEMORY,cuMemCreate@1=2"
std::string parse_faults(std::string_view value, std::vector<FaultRule>& rules) {
  constexpr std::string_view kExpected =
      "FUNCTION@N=RESULT[,...] with N >= 1 and RESULT a CUresult name or number, "
      "e.g. cuMemAlloc_v2@3=CUDA_ERROR_OUT_OF_MEMORY";
  for (std::string_view item : split(value, ',')) {
    const size_t at = item.find('@');
    const size_t equals = item.find('=');
    if (at == std::string_view::npos || equals == std::string_view::npos || equals < at || at == 0)
      return bad_value("SIMCUDA_FAIL", value, kExpected);
    const std::optional<int64_t> nth = parse_integer(item.substr(at + 1, equals - at - 1));
    const std::optional<CUresult> result = parse_result(item.substr(equals + 1));
    if (!nth || *nth < 1 || !result) return bad_value("SIMCUDA_FAIL", value, kExpected);
    rules.push_back({std::string(item.substr(0, at)), static_cast<uint64_t>(*nth), *result});
  }
  return {};
}

// "CONCURRENT_MANAGED_ACCESS=0,HOST_NUMA_ID=1"
std::string parse_attributes(std::string_view value, std::vector<AttributeOverride>& overrides) {
  for (std::string_view item : split(value, ',')) {
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos)
      return bad_value("SIMCUDA_ATTRS", value, "NAME=VALUE[,...], e.g. CONCURRENT_MANAGED_ACCESS=0");
    const std::optional<CUdevice_attribute> attribute = attribute_by_name(item.substr(0, equals));
    if (!attribute)
      return bad_value("SIMCUDA_ATTRS", value,
                       "attribute names among: " + overridable_attribute_names());
    const std::optional<int64_t> number = parse_integer(item.substr(equals + 1));
    if (!number || *number < INT32_MIN || *number > INT32_MAX)
      return bad_value("SIMCUDA_ATTRS", value, "an integer value for each attribute");
    overrides.push_back({*attribute, static_cast<int>(*number)});
  }
  return {};
}

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

}  // namespace

ConfigResult config_from_environment() {
  ConfigResult out;
  Config& config = out.config;
  if (const char* value = variable("SIMCUDA_DEVICES")) {
    const std::optional<int64_t> count = parse_integer(value);
    if (!count || *count < 1 || *count > kMaxDevices) {
      out.error = bad_value("SIMCUDA_DEVICES", value, "a device count from 1 to 16");
      return out;
    }
    config.device_count = static_cast<int>(*count);
  }
  if (const char* value = variable("SIMCUDA_VRAM")) {
    const std::optional<uint64_t> bytes = vramspill::parse_size(value);
    if (!bytes || *bytes == 0) {
      out.error = bad_value("SIMCUDA_VRAM", value, "a size per device such as 512MiB or 80GB");
      return out;
    }
    config.vram_bytes = *bytes;
  }
  if (const char* value = variable("SIMCUDA_STATS")) config.stats_path = value;
  if (const char* value = variable("SIMCUDA_REMAP_VIOLATIONS")) {
    const std::string_view action = value;
    if (action != "report" && action != "abort") {
      out.error = bad_value("SIMCUDA_REMAP_VIOLATIONS", value, "report or abort");
      return out;
    }
    config.abort_on_remap_violation = action == "abort";
  }
  if (const char* value = variable("SIMCUDA_VMM_COST")) {
    const std::string_view cost = value;
    if (cost != "per-granule" && cost != "per-call") {
      out.error = bad_value("SIMCUDA_VMM_COST", value, "per-granule or per-call");
      return out;
    }
    config.cost.vmm_cost_per_call = cost == "per-call";
  }
  if (const char* value = variable("SIMCUDA_FAIL")) {
    out.error = parse_faults(value, config.faults);
    if (!out.error.empty()) return out;
  }
  if (const char* value = variable("SIMCUDA_ATTRS")) {
    out.error = parse_attributes(value, config.attribute_overrides);
    if (!out.error.empty()) return out;
  }
  for (auto [name, target] : {std::pair{"SIMCUDA_HBM_BW", &config.cost.hbm_bytes_per_second},
                              std::pair{"SIMCUDA_LINK_BW", &config.cost.link_bytes_per_second}}) {
    if (const char* value = variable(name)) {
      const std::optional<double> rate = vramspill::parse_rate(value);
      if (!rate) {
        out.error = bad_value(name, value, "bytes per second, e.g. 5e10 or 50GB");
        return out;
      }
      *target = *rate;
    }
  }
  return out;
}

}  // namespace simcuda
