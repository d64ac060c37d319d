#include "config/config.h"

#include <algorithm>
#include <cmath>

#include "config/options.h"

namespace vramspill {

uint64_t Budget::resolve(uint64_t total) const {
  if (!is_fraction_) return std::min(bytes_, total);
  // long double keeps every byte of totals up to 2^64 exact before the fraction is applied, so
  // 100% is exactly the total.
  const long double bytes = std::floor(static_cast<long double>(total) * fraction_);
  if (!(bytes < static_cast<long double>(total))) return total;  // also NaN
  return bytes > 0 ? static_cast<uint64_t>(bytes) : 0;
}

uint64_t DeviceConfig::limit(uint64_t device_total) const {
  const uint64_t allowed = budget.resolve(device_total);
  return allowed > reserve_bytes ? allowed - reserve_bytes : 0;
}

Config default_config() {
  Config config;
  for (const OptionSpec& option : options()) {
    // A default that does not parse is a bug in the table, caught by config_test; here it keeps
    // the placeholder rather than stopping the program.
    const ParsedOption parsed = parse_option_text(option, option.default_text);
    if (parsed.ok()) option.store(config, *parsed.value);
  }
  return config;
}

}  // namespace vramspill
