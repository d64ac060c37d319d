#include "core/sizes.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace simcuda {
namespace {

struct Unit {
  std::string_view suffix;
  double multiplier;
};

constexpr double kKi = 1024.0;
constexpr double kKilo = 1000.0;

// Longest suffixes first, so "MiB" is not read as "B" after a number "512Mi".
constexpr std::array kUnits = {
    Unit{"KiB", kKi},          Unit{"MiB", kKi * kKi},        Unit{"GiB", kKi * kKi * kKi},
    Unit{"TiB", kKi * kKi * kKi * kKi},
    Unit{"KB", kKilo},         Unit{"MB", kKilo * kKilo},     Unit{"GB", kKilo * kKilo * kKilo},
    Unit{"TB", kKilo * kKilo * kKilo * kKilo},
    Unit{"K", kKi},            Unit{"M", kKi * kKi},          Unit{"G", kKi * kKi * kKi},
    Unit{"T", kKi * kKi * kKi * kKi},
    Unit{"B", 1.0},
};

// Splits "1.5GiB" into 1.5 and the multiplier of "GiB".
std::optional<double> parse_scaled(std::string_view text) {
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  double multiplier = 1.0;
  for (const Unit& unit : kUnits) {
    if (text.size() > unit.suffix.size() && text.ends_with(unit.suffix)) {
      multiplier = unit.multiplier;
      text.remove_suffix(unit.suffix.size());
      break;
    }
  }
  const std::string number(text);
  if (number.empty() || number.front() == '-' || number.front() == '+' || number.front() == ' ')
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(number.c_str(), &end);
  if (errno != 0 || end != number.c_str() + number.size() || !std::isfinite(value) || value < 0)
    return std::nullopt;
  return value * multiplier;
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

}  // namespace simcuda
