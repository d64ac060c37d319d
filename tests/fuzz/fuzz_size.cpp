// libFuzzer target: sizes, rates and percents (util/sizes.h), and the two option types built on
// them: a size (spill.min_size) and a size or percent (device.budget). The input is the text.
// Besides "no crash, no undefined behaviour, no exception" it checks:
//  - a text is never both a size and a percent;
//  - a plain decimal integer is that many bytes, exactly;
//  - a size round-trips through format_bytes(): "1.5 GiB" written as "1.5GiB" parses back to
//    within the formatter's one decimal;
//  - a positive size below 2^53 is also a rate of that many bytes (same scaling, same rounding);
//  - the option types agree with the parsers: a size option takes exactly the sizes, a size or
//    percent option exactly the sizes above 0 and the percents above 0 and at most 100, with the
//    same values, and every refusal says why.
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "config/config.h"
#include "config/options.h"
#include "fuzz_checks.h"
#include "util/bytes.h"
#include "util/sizes.h"

namespace vramspill::fuzz {
namespace {

std::string_view without_trailing_spaces(std::string_view text) {
  while (text.ends_with(' ')) text.remove_suffix(1);
  return text;
}

void check_plain_integer(std::string_view text, uint64_t size) {
  const std::string_view digits = without_trailing_spaces(text);
  if (digits.find_first_not_of("0123456789") != std::string_view::npos) return;
  uint64_t exact = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), exact);
  require(error == std::errc{} && end == digits.data() + digits.size() && size == exact,
          "a plain decimal integer is exactly that many bytes", text);
}

// format_bytes() writes "<number> <unit>" with one decimal from KiB up.
void check_formatter_round_trip(uint64_t size) {
  const std::string formatted = format_bytes(size);
  std::array<char, 16> small{};
  require(format_bytes(size, small) == formatted.size(), "16 chars hold any formatted size",
          formatted);
  const std::size_t space = formatted.find(' ');
  require(space != std::string::npos, "a formatted size is '<number> <unit>'", formatted);
  const std::string_view unit = std::string_view(formatted).substr(space + 1);
  static constexpr std::array<std::string_view, 5> kParsedUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t power = 0;
  while (power < kParsedUnits.size() && kParsedUnits[power] != unit) ++power;
  // PiB and EiB: format_bytes() writes them, parse_size() does not read them.
  if (power == kParsedUnits.size()) return;
  const std::string written = formatted.substr(0, space) + std::string(unit);
  const std::optional<uint64_t> back = parse_size(written);
  require(back.has_value(), "a formatted size parses", written);
  const double half_a_tenth = 0.05 * std::pow(1024.0, static_cast<double>(power));
  require(std::fabs(static_cast<double>(*back) - static_cast<double>(size)) <= half_a_tenth + 1,
          "a formatted size parses back to within its last digit", written);
}

void check_options(std::string_view text, std::optional<uint64_t> size,
                   std::optional<double> percent) {
  const OptionSpec* size_option = find_option("spill", "min_size");
  const OptionSpec* budget_option = find_option("device", "budget");
  require(size_option != nullptr && size_option->type == OptionType::kSize,
          "spill.min_size is a size");
  require(budget_option != nullptr && budget_option->type == OptionType::kSizeOrPercent,
          "device.budget is a size or percent");

  const ParsedOption as_size = parse_option_text(*size_option, text);
  require(as_size.ok() == size.has_value(), "a size option takes exactly the sizes", text);
  if (as_size.ok()) require(std::get<uint64_t>(*as_size.value) == *size, "with their value", text);
  if (!as_size.ok()) require(!as_size.problem.empty(), "a refusal says why", text);

  const ParsedOption as_budget = parse_option_text(*budget_option, text);
  const bool good_percent = percent && *percent > 0 && *percent <= 1;
  const bool good_size = size && *size > 0;
  require(as_budget.ok() == (good_percent || good_size),
          "a size or percent option takes the sizes above 0 and the percents in (0, 100]", text);
  if (!as_budget.ok()) {
    require(!as_budget.problem.empty(), "a refusal says why", text);
    return;
  }
  const Budget expected = good_percent ? Budget::fraction(*percent) : Budget::bytes(*size);
  require(std::get<Budget>(*as_budget.value) == expected, "with their value", text);
}

void check(std::string_view text) {
  const std::optional<uint64_t> size = parse_size(text);
  const std::optional<double> percent = parse_percent(text);
  const std::optional<double> rate = parse_rate(text);
  require(!(size && percent), "no text is both a size and a percent", text);
  if (percent) require(std::isfinite(*percent) && *percent >= 0, "a percent is finite, >= 0", text);
  if (rate) require(std::isfinite(*rate) && *rate > 0, "a rate is finite and above 0", text);
  if (size) {
    check_plain_integer(text, *size);
    check_formatter_round_trip(*size);
    if (*size > 0 && *size < (1ull << 53))
      require(rate && std::llround(*rate) == static_cast<long long>(*size),
              "a positive size is also a rate of that many bytes", text);
  }
  check_options(text, size, percent);
}

}  // namespace
}  // namespace vramspill::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  // Nothing may throw: these parsers run behind the shim's C boundary (and in simcuda).
  try {
    vramspill::fuzz::check(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (...) {
    vramspill::fuzz::fail("no exception escapes the parsers");
  }
  return 0;
}
