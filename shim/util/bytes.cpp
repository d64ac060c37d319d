#include "util/bytes.h"

#include <array>
#include <cstdio>

namespace vramspill {

std::size_t format_bytes(uint64_t bytes, std::span<char> out) noexcept {
  if (out.empty()) return 0;
  static constexpr std::array<const char*, 7> kUnits = {"B",   "KiB", "MiB", "GiB",
                                                        "TiB", "PiB", "EiB"};
  int written = 0;
  if (bytes < 1024) {
    written = std::snprintf(out.data(), out.size(), "%u B", static_cast<unsigned>(bytes));
  } else {
    std::size_t unit = 0;
    auto value = static_cast<double>(bytes);
    while (value >= 1024.0 && unit + 1 < kUnits.size()) {
      value /= 1024.0;
      ++unit;
    }
    // 1023.96 KiB would print as "1024.0 KiB": step up so the number always reads below 1024.
    if (value >= 1023.95 && unit + 1 < kUnits.size()) {
      value /= 1024.0;
      ++unit;
    }
    written = std::snprintf(out.data(), out.size(), "%.1f %s", value, kUnits[unit]);
  }
  if (written < 0) {
    out[0] = '\0';
    return 0;
  }
  return static_cast<std::size_t>(written) < out.size() ? static_cast<std::size_t>(written)
                                                        : out.size() - 1;
}

std::string format_bytes(uint64_t bytes) {
  std::array<char, 32> buffer{};
  const std::size_t length = format_bytes(bytes, buffer);
  return {buffer.data(), length};
}

}  // namespace vramspill
