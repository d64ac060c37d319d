// The host-memory budget: how many bytes of host memory the shim holds pinned or managed on the
// program's behalf, against one limit ([spill] host_limit).
//
// One HostBudget per process, shared by every tier that takes host memory: the pinned host pool
// reserves a region's bytes before it pins them and releases them after it unpins them; managed
// spills are charged the same way. Nothing here decides the limit (the hooks set it, and with a
// percent move it as the memory available to the job changes: Note [A percent host limit follows
// the container] in hooks/shim_state.cpp); this only keeps the count honest under threads.
//
// Note [Host budget reservations]
// The limit must hold against races: two threads must never both pass a check that only one of
// them fits, or together they pin more than the machine can spare and the kernel's OOM killer
// takes the job. So try_reserve() is one compare-and-swap that adds the request only if the sum
// stays within the limit, and a tier reserves *before* it pins (the reservation is given back if
// pinning fails). The limit may change at any time, from another thread, while reservations run;
// lowering it below what is held revokes nothing: later reservations fail until enough has been
// released (or the limit rises again). release() of more than is held is a caller's bug; the count
// clamps at zero and counts an internal error instead of wrapping around to "everything used".
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>

namespace vramspill::core {

class HostBudget {
 public:
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

  // Constant-initialisable (a test holds it to that), so a HostBudget in static storage runs no
  // code when the shim is loaded.
  constexpr HostBudget() noexcept = default;
  constexpr explicit HostBudget(uint64_t limit_bytes) noexcept : limit_(limit_bytes) {}
  HostBudget(const HostBudget&) = delete;
  HostBudget& operator=(const HostBudget&) = delete;

  // Adds `bytes` to the held count if the result stays within the limit; false (and nothing
  // changes) otherwise. A zero-byte reservation always succeeds.
  [[nodiscard]] bool try_reserve(uint64_t bytes) noexcept {
    uint64_t held = used_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t limit = limit_.load(std::memory_order_relaxed);
      if (bytes > limit || held > limit - bytes) {
        refusals_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      if (used_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed)) {
        raise_peak(held + bytes);
        return true;
      }
    }
  }

  // Adds `bytes` whatever the limit: memory already taken that must be counted (the program's
  // own pinned memory). Later reservations then find less room.
  void charge(uint64_t bytes) noexcept {
    raise_peak(used_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  }

  // Gives back bytes an earlier try_reserve() or charge() took.
  void release(uint64_t bytes) noexcept {
    uint64_t held = used_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t next = bytes > held ? 0 : held - bytes;
      if (used_.compare_exchange_weak(held, next, std::memory_order_relaxed)) {
        if (bytes > held) internal_errors_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }

  uint64_t used() const noexcept { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  // What a reservation could still get right now (racy by nature: a hint for sizing requests).
  uint64_t available() const noexcept {
    const uint64_t held = used();
    const uint64_t cap = limit();
    return held >= cap ? 0 : cap - held;
  }
  void set_limit(uint64_t limit_bytes) noexcept {
    limit_.store(limit_bytes, std::memory_order_relaxed);
  }

  uint64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  uint64_t refusals() const noexcept { return refusals_.load(std::memory_order_relaxed); }
  uint64_t internal_errors() const noexcept {
    return internal_errors_.load(std::memory_order_relaxed);
  }

 private:
  // Each counter is a plain number whose only invariant is with itself (the limit check is one
  // compare-and-swap on used_), so relaxed ordering suffices.
  void raise_peak(uint64_t held) noexcept {
    uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (held > peak && !peak_.compare_exchange_weak(peak, held, std::memory_order_relaxed)) {
    }
  }

  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> limit_{kUnlimited};
  std::atomic<uint64_t> peak_{0};
  std::atomic<uint64_t> refusals_{0};
  std::atomic<uint64_t> internal_errors_{0};
};

}  // namespace vramspill::core
