// Which [[tiered.rule]] a new tiered block falls under (README.md, "Rules for tiered blocks"):
// the first rule, in the file's order, whose size range holds the block and whose patterns each
// match a frame of the stack that allocated it. Tiered placement then carries out the rule's
// action (Note [Rules before the policy] in placement/tiered_placement.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "config/config.h"
#include "util/call_stack.h"

namespace vramspill::placement {

class TieredRules {
 public:
  // `rules` (at most kMaxTieredRules; later ones are ignored) must outlive this.
  explicit TieredRules(std::span<const TieredRule> rules) noexcept;
  TieredRules(const TieredRules&) = delete;
  TieredRules& operator=(const TieredRules&) = delete;

  bool empty() const noexcept { return rules_.empty(); }
  // Whether a rule names a library or a symbol: only then is a stack worth capturing.
  bool need_call_sites() const noexcept { return need_call_sites_; }

  // The first rule matching a block of `bytes` allocated through `frames` (innermost first),
  // counted as a match; null when none does. Thread-safe.
  const TieredRule* match(uint64_t bytes, std::span<const CallFrame> frames) noexcept;

  // "tiered rules: job.toml:3:1 pin matched 4 blocks, job.toml:7:1 prefer_host matched 1
  // block", or "" without rules. Throws std::bad_alloc.
  std::string summary() const;

 private:
  std::span<const TieredRule> rules_;
  bool need_call_sites_ = false;
  std::array<std::atomic<uint64_t>, kMaxTieredRules> matches_{};
};

}  // namespace vramspill::placement
