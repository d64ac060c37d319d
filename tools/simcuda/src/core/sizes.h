// Parsing of human-written byte sizes and rates ("512MiB", "1.5GB", "5e10").
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace simcuda {

// Accepts a non-negative number with an optional unit: B, K/KiB, M/MiB, G/GiB, T/TiB (powers of
// 1024) or KB, MB, GB, TB (powers of 1000). Returns nullopt on anything else, and on overflow.
std::optional<uint64_t> parse_size(std::string_view text);

// A positive rate in units per second: a plain number ("4.8e12") or a size with a unit ("50GB").
std::optional<double> parse_rate(std::string_view text);

}  // namespace simcuda
