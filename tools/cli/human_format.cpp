#include "human_format.h"

#include <array>
#include <cstdio>

namespace vramspill::cli {

std::string format_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  char text[32];
  if (seconds < 10) {
    std::snprintf(text, sizeof text, "%.1f s", seconds);
    return text;
  }
  const auto whole = static_cast<uint64_t>(seconds);
  if (whole < 60) {
    std::snprintf(text, sizeof text, "%llu s", static_cast<unsigned long long>(whole));
  } else if (whole < 3600) {
    std::snprintf(text, sizeof text, "%llum%02llus", static_cast<unsigned long long>(whole / 60),
                  static_cast<unsigned long long>(whole % 60));
  } else if (whole < 86400) {
    std::snprintf(text, sizeof text, "%lluh%02llum", static_cast<unsigned long long>(whole / 3600),
                  static_cast<unsigned long long>(whole % 3600 / 60));
  } else {
    std::snprintf(text, sizeof text, "%llud%02lluh", static_cast<unsigned long long>(whole / 86400),
                  static_cast<unsigned long long>(whole % 86400 / 3600));
  }
  return text;
}

}  // namespace vramspill::cli
