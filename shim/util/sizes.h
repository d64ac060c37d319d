// Parsing of human-written byte sizes, rates and percentages ("512MiB", "1.5GB", "5e10", "90%").
// Shared by the shim's configuration and by simcuda, so both accept exactly the same spellings.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace vramspill {

// Accepts a non-negative number with an optional unit: B, K/KiB, M/MiB, G/GiB, T/TiB (powers of
// 1024) or KB, MB, GB, TB (powers of 1000). Returns nullopt on anything else, and on overflow.
// A number of digits only is exact up to 2^64 - 1 bytes (Note [Exact integer sizes]); one in bytes
// with a fraction ("0.9") is refused (Note [A size in bytes is whole]).
std::optional<uint64_t> parse_size(std::string_view text);

// A positive rate in units per second: a plain number ("4.8e12") or a size with a unit ("50GB").
std::optional<double> parse_rate(std::string_view text);

// "90%" -> 0.9. A non-negative number directly followed by '%'; the caller checks the range.
std::optional<double> parse_percent(std::string_view text);

}  // namespace vramspill
