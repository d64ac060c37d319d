// A test-and-test-and-set lock for critical sections of a few nanoseconds (the ledger's shards).
//
// Note [Why a spin lock for the shards]
// Every device allocation and free takes one shard lock, held for one hash-table probe. An
// uncontended pthread mutex costs two atomic read-modify-writes (lock and unlock) plus two calls
// into libc; this lock costs one exchange and one plain release store, which is what keeps the
// ledger's part of an alloc+free pair cheap (shim/README.md, "Costs"). Holders never block
// while they hold it (no driver calls, no logging), so a waiter spins briefly and then yields
// rather than sleeping on a futex. The one slow holder is a shard table growing (a reallocation,
// rare and amortised); yielding keeps waiters from burning a core through it.
#pragma once

#include <atomic>
#include <thread>

namespace vramspill::core {

class SpinLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      // Spin on a plain load so waiters share the cache line instead of bouncing it.
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < kSpinsBeforeYield) {
          relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }

  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }

  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 128;

  static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }

  std::atomic<bool> locked_{false};
};

}  // namespace vramspill::core
