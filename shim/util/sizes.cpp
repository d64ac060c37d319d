#include "util/sizes.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>

namespace vramspill {
namespace {

struct Unit {
  std::string_view suffix;
  uint64_t multiplier;
};

constexpr uint64_t kKi = 1024;
constexpr uint64_t kKilo = 1000;

// Longest suffixes first, so "MiB" is not read as "B" after a number "512Mi".
// clang-format off
constexpr std::array kUnits = {
    Unit{"KiB", kKi},          Unit{"MiB", kKi * kKi},        Unit{"GiB", kKi * kKi * kKi},
    Unit{"TiB", kKi * kKi * kKi * kKi},
    Unit{"KB", kKilo},         Unit{"MB", kKilo * kKilo},     Unit{"GB", kKilo * kKilo * kKilo},
    Unit{"TB", kKilo * kKilo * kKilo * kKilo},
    Unit{"K", kKi},            Unit{"M", kKi * kKi},          Unit{"G", kKi * kKi * kKi},
    Unit{"T", kKi * kKi * kKi * kKi},
    Unit{"B", 1},
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

struct Scaled {
  std::string_view number;
  uint64_t multiplier;
};

// Splits "1.5GiB" into "1.5" and the multiplier of "GiB" (1 without a unit).
Scaled split_unit(std::string_view text) {
  text = trim_trailing_spaces(text);
  for (const Unit& unit : kUnits) {
    if (text.size() > unit.suffix.size() && text.ends_with(unit.suffix)) {
      text.remove_suffix(unit.suffix.size());
      return {text, unit.multiplier};
    }
  }
  return {text, 1};
}

// The number times the multiplier, as a double: "1.5GiB", "5e10". Finite, like the number:
// "1e300T" overflows to infinity.
std::optional<double> scaled_value(const Scaled& scaled) {
  const std::optional<double> value = parse_number(scaled.number);
  if (!value) return std::nullopt;
  const double scaled_number = *value * static_cast<double>(scaled.multiplier);
  if (!std::isfinite(scaled_number)) return std::nullopt;
  return scaled_number;
}

// Note [A size in bytes is whole]
// A size in bytes (no unit, or B) with a fraction ("0.9", "1.5B") is refused, not rounded: "0.9"
// or "0.5" is someone's share of the device written as a fraction, which rounded would be a budget
// of 0 or 1 byte (1 byte passes the check against 0, and then every allocation spills and
// cuMemGetInfo shows a device of 1 byte). With a larger unit a fraction is a size, rounded to
// the nearest byte ("1.5GB", "0.3GiB"), as is a number in bytes that makes whole bytes ("1e3").

// Note [Exact integer sizes]
// A double holds every integer only up to 2^53: read through one, "9007199254740993" would be
// ...992 bytes, and 2^64 - 1 would round up to 2^64 and be refused as an overflow. So a size
// whose number is digits only ("123", "3GiB") is computed in integers, exactly; only one with a
// fraction or an exponent ("1.5GB", "5e10") goes through a double.
std::optional<uint64_t> parse_integer_size(const Scaled& scaled) {
  uint64_t value = 0;
  const char* const end = scaled.number.data() + scaled.number.size();
  const auto [stop, error] = std::from_chars(scaled.number.data(), end, value);
  if (error != std::errc{} || stop != end) return std::nullopt;  // also out of range
  if (value > UINT64_MAX / scaled.multiplier) return std::nullopt;
  return value * scaled.multiplier;
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view text) {
  const Scaled scaled = split_unit(text);
  if (!scaled.number.empty() &&
      scaled.number.find_first_not_of("0123456789") == std::string_view::npos)
    return parse_integer_size(scaled);  // Note [Exact integer sizes]
  const std::optional<double> bytes = scaled_value(scaled);
  // 2^64 is exactly representable; anything at or above it does not fit.
  if (!bytes || *bytes >= 18446744073709551616.0) return std::nullopt;
  // Note [A size in bytes is whole]
  if (scaled.multiplier == 1 && *bytes != std::floor(*bytes)) return std::nullopt;
  return static_cast<uint64_t>(std::round(*bytes));
}

std::optional<double> parse_rate(std::string_view text) {
  const std::optional<double> rate = scaled_value(split_unit(text));
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
