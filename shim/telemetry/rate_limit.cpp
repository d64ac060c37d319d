#include "telemetry/rate_limit.h"

#include <array>
#include <atomic>

namespace vramspill {
namespace {

// Note [Rate limit slots]
// A key's whole state is one 64-bit word: the index of its current window (now / kRateWindow)
// in the high half and the number of messages seen in that window in the low half. Whoever
// moves the slot to a new window (one CAS) learns how many the old window suppressed, so the
// count is reported exactly once without a lock. Messages past kRateBurst still count, up to
// the 32-bit limit. 2^32 windows of 10 s outlast the steady clock.
constexpr uint64_t kCountMask = 0xffff'ffffULL;

constexpr uint64_t pack(uint64_t window, uint64_t count) { return (window << 32) | count; }
constexpr uint64_t window_of(uint64_t state) { return state >> 32; }
constexpr uint64_t count_of(uint64_t state) { return state & kCountMask; }
constexpr uint64_t excess(uint64_t count) { return count > kRateBurst ? count - kRateBurst : 0; }

constinit std::array<std::atomic<uint64_t>, static_cast<std::size_t>(RateKey::kCount)> g_slots{};

constexpr std::array<std::string_view, static_cast<std::size_t>(RateKey::kCount)> kDescriptions = {
#define VRAMSPILL_RATE_KEY_DESCRIPTION(name, description) description,
    VRAMSPILL_RATE_KEYS(VRAMSPILL_RATE_KEY_DESCRIPTION)
#undef VRAMSPILL_RATE_KEY_DESCRIPTION
};

std::atomic<uint64_t>& slot(RateKey key) { return g_slots[static_cast<std::size_t>(key)]; }

}  // namespace

std::string_view rate_key_description(RateKey key) {
  const auto index = static_cast<std::size_t>(key);
  return index < kDescriptions.size() ? kDescriptions[index] : "unknown";
}

RateDecision should_log(RateKey key) noexcept {
  return should_log(key, std::chrono::steady_clock::now().time_since_epoch());
}

RateDecision should_log(RateKey key, std::chrono::nanoseconds now) noexcept {
  if (static_cast<std::size_t>(key) >= g_slots.size()) return {};
  const uint64_t window = static_cast<uint64_t>(now / kRateWindow) & kCountMask;
  std::atomic<uint64_t>& state = slot(key);
  uint64_t old_state = state.load(std::memory_order_relaxed);
  while (true) {
    // A clock that went backwards (tests, or a caller passing an old time) stays in the window.
    const bool new_window = window > window_of(old_state);
    const uint64_t old_count = new_window ? 0 : count_of(old_state);
    const uint64_t count = old_count < kCountMask ? old_count + 1 : old_count;
    const uint64_t next = pack(new_window ? window : window_of(old_state), count);
    if (!state.compare_exchange_weak(old_state, next, std::memory_order_relaxed)) continue;
    RateDecision decision;
    decision.log = count <= kRateBurst;
    decision.last_in_window = count == kRateBurst;
    if (new_window) decision.suppressed_before = excess(count_of(old_state));
    return decision;
  }
}

uint64_t take_suppressed(RateKey key) noexcept {
  if (static_cast<std::size_t>(key) >= g_slots.size()) return 0;
  std::atomic<uint64_t>& state = slot(key);
  uint64_t old_state = state.load(std::memory_order_relaxed);
  while (true) {
    const uint64_t suppressed = excess(count_of(old_state));
    if (suppressed == 0) return 0;
    // Back to exactly the burst: reported once, and the window's later messages still wait.
    if (state.compare_exchange_weak(old_state, pack(window_of(old_state), kRateBurst),
                                    std::memory_order_relaxed))
      return suppressed;
  }
}

void reset_rate_limits() noexcept {
  for (std::atomic<uint64_t>& state : g_slots) state.store(0, std::memory_order_relaxed);
}

}  // namespace vramspill
