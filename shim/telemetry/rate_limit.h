// Rate limiting for warnings that can repeat (one per refused allocation, one per fallback):
// at most kRateBurst messages per key in each kRateWindow, and a count of what was left out.
// logging::limited() (telemetry/log.h) uses this; call should_log() directly only to decide
// whether to do expensive work for a message.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace vramspill {

// Each warning that can repeat gets a key; the name appears in the exit report of suppressed
// messages. Add a row here for a new one (keys are slots in a fixed array: no allocation, no lock).
#define VRAMSPILL_RATE_KEYS(X)                                                    \
  X(kOverBudget, "allocations refused over the budget")                           \
  X(kDriverFallback, "internal errors that fell back to the driver's behaviour")  \
  X(kSpilled, "allocations spilled to host memory")                               \
  X(kNotSpilled, "allocations that could not spill")                              \
  X(kManagedAdvice, "managed spill memory left unadvised")                        \
  X(kSpilledIpc, "cuIpcGetMemHandle refusals of spilled memory")                 \
  X(kPolicyLearning, "changes in what the eviction policy learned of the job")

enum class RateKey : uint8_t {
#define VRAMSPILL_RATE_KEY_ENUM(name, description) name,
  VRAMSPILL_RATE_KEYS(VRAMSPILL_RATE_KEY_ENUM)
#undef VRAMSPILL_RATE_KEY_ENUM
      kCount
};

std::string_view rate_key_description(RateKey key);

inline constexpr uint32_t kRateBurst = 5;
inline constexpr std::chrono::nanoseconds kRateWindow = std::chrono::seconds(10);

struct RateDecision {
  bool log = false;
  // Messages of this key suppressed in the windows before this one, not yet reported: append
  // "(suppressed N similar messages)" to this message.
  uint64_t suppressed_before = 0;
  // This is the last message admitted in its window: say that more will be suppressed.
  bool last_in_window = false;

  explicit operator bool() const { return log; }
};

// Lock-free (one compare-and-swap on the key's slot); safe from any thread. `now` is the
// steady clock since its epoch; the overload without it reads the clock.
RateDecision should_log(RateKey key) noexcept;
RateDecision should_log(RateKey key, std::chrono::nanoseconds now) noexcept;

// Takes the count of messages suppressed in the current window and not reported yet (for the
// report at exit); later messages in the window stay suppressed.
uint64_t take_suppressed(RateKey key) noexcept;

// Forgets all history (tests).
void reset_rate_limits() noexcept;

}  // namespace vramspill
