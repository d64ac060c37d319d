#include "util/sizes.h"

#include <array>
#include <charconv>
#include <cmath>
#include <system_error>

namespace vramspill {
namespace {

struct Unit {
  std::string_view suffix;
  double multiplier;
};

constexpr double kKi = 1024.0;
constexpr double kKilo = 1000.0;

// Longest suffixes first, so "MiB" is not read as "B" after a number "512Mi".
// clang-format off
constexpr std::array kUnits = {
    Unit{"KiB", kKi},          Unit{"MiB", kKi * kKi},        Unit{"GiB", kKi * kKi * kKi},
    Unit{"TiB", kKi * kKi * kKi * kKi},
    Unit{"KB", kKilo},         Unit{"MB", kKilo * kKilo},     Unit{"GB", kKilo * kKilo * kKilo},
    Unit{"TB", kKilo * kKilo * kKilo * kKilo},
    Unit{"K", kKi},            Unit{"M", kKi * kKi},          Unit{"G", kKi * kKi * kKi},
    Unit{"T", kKi * kKi * kKi * kKi},
    Unit{"B", 1.0},
};
// clang-format on

// A plain non-negative decimal number. std::from_chars, not strtod: strtod follows LC_NUMERIC,
// and the shim runs inside programs that may have set a locale whose decimal point is a comma.
std::optional<double> parse_number(std::string_view text) {
  if (text.empty() || text.front() == '-' || text.front() == '+') return std::nullopt;
  double value = 0;
  const auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value) ||
      value < 0)
    return std::nullopt;
  return value;
}

std::string_view trim_trailing_spaces(std::string_view text) {
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// Splits "1.5GiB" into 1.5 and the multiplier of "GiB".
std::optional<double> parse_scaled(std::string_view text) {
  text = trim_trailing_spaces(text);
  double multiplier = 1.0;
  for (const Unit& unit : kUnits) {
    if (text.size() > unit.suffix.size() && text.ends_with(unit.suffix)) {
      multiplier = unit.multiplier;
      text.remove_suffix(unit.suffix.size());
      break;
    }
  }
  const std::optional<double> value = parse_number(text);
  if (!value) return std::nullopt;
  return *value * multiplier;
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view text) {
  const std::optional<double> bytes = parse_scaled(text);
  // 2^64 is exactly representable; anything at or above it does not fit.
  if (!bytes || *bytes >= 18446744073709551616.0) return std::nullopt;
  return static_cast<uint64_t>(std::round(*bytes));
}

std::optional<double> parse_rate(std::string_view text) {
  const std::optional<double> rate = parse_scaled(text);
  if (!rate || *rate <= 0) return std::nullopt;
  return rate;
}

std::optional<double> parse_percent(std::string_view text) {
  text = trim_trailing_spaces(text);
  if (!text.ends_with('%')) return std::nullopt;
  text.remove_suffix(1);
  const std::optional<double> percent = parse_number(text);
  if (!percent) return std::nullopt;
  return *percent / 100.0;
}

}  // namespace vramspill
