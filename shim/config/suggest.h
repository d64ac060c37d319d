// "Did you mean ...?" for unknown keys, sections and environment variables.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace vramspill {

// The candidate closest to `word` (ASCII case ignored) when it is close enough to be a typo of
// it: at most two edits, and fewer than half the candidate's length. Ties go to the first.
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates);

}  // namespace vramspill
