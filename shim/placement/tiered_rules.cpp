#include "placement/tiered_rules.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>

namespace vramspill::placement {
namespace {

// Whether some frame's `part` (its library or its symbol) matches `pattern`; an empty pattern
// asks nothing. fnmatch needs terminated strings: a name longer than the buffer cannot match.
bool some_frame_matches(const std::string& pattern, std::span<const CallFrame> frames,
                        std::string_view CallFrame::*part) {
  if (pattern.empty()) return true;
  return std::ranges::any_of(frames, [&](const CallFrame& frame) {
    const std::string_view name = frame.*part;
    char terminated[512];
    if (name.empty() || name.size() >= sizeof terminated) return false;
    name.copy(terminated, name.size());
    terminated[name.size()] = '\0';
    return fnmatch(pattern.c_str(), terminated, 0) == 0;
  });
}

}  // namespace

TieredRules::TieredRules(std::span<const TieredRule> rules) noexcept
    : rules_(rules.first(std::min(rules.size(), kMaxTieredRules))),
      need_call_sites_(std::ranges::any_of(
          rules_, [](const TieredRule& rule) { return rule.needs_call_site(); })) {}

const TieredRule* TieredRules::match(uint64_t bytes, std::span<const CallFrame> frames) noexcept {
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    const TieredRule& rule = rules_[i];
    if (bytes < rule.min_size || bytes > rule.max_size) continue;
    if (!some_frame_matches(rule.library, frames, &CallFrame::library)) continue;
    if (!some_frame_matches(rule.symbol, frames, &CallFrame::symbol)) continue;
    matches_[i].fetch_add(1, std::memory_order_relaxed);
    return &rule;
  }
  return nullptr;
}

std::string TieredRules::summary() const {
  std::string out;
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    const uint64_t matched = matches_[i].load(std::memory_order_relaxed);
    out +=
        fmt::format("{}{} {} matched {} block{}", out.empty() ? "tiered rules: " : ", ",
                    rules_[i].place, kRuleActionNames[static_cast<std::size_t>(rules_[i].action)],
                    matched, matched == 1 ? "" : "s");
  }
  return out;
}

}  // namespace vramspill::placement
