#include "core/host_clock.h"

#include <array>
#include <atomic>
#include <cstddef>

namespace simcuda {
namespace {

thread_local double thread_clock = 0.0;
std::atomic<double> latest_clock{0.0};

// The works the thread queried while its clock stood at queried_at (Note [Host clock]): a query
// of one of them again, with the clock unmoved, is polling.
thread_local double queried_at = -1.0;
thread_local std::array<uint64_t, 64> queried{};
thread_local std::size_t queried_count = 0;

}  // namespace

double host_clock() { return thread_clock; }

void host_clock_observe(double seconds) {
  if (seconds <= thread_clock) return;
  thread_clock = seconds;
  double latest = latest_clock.load(std::memory_order_relaxed);
  while (latest < seconds &&
         !latest_clock.compare_exchange_weak(latest, seconds, std::memory_order_relaxed)) {
  }
}

void host_clock_advance(double seconds) { host_clock_observe(thread_clock + seconds); }

bool host_clock_query_sees(uint64_t work, double modeled_end) noexcept {
  if (modeled_end <= thread_clock) return true;
  if (queried_at != thread_clock) {  // time passed: what was queried before is stale
    queried_at = thread_clock;
    queried_count = 0;
  }
  bool polled = queried_count == queried.size();  // a program asking that much is polling
  for (std::size_t i = 0; i < queried_count && !polled; ++i) polled = queried[i] == work;
  if (polled) {
    host_clock_observe(modeled_end);  // asked again with no time passed: waited for
    return true;
  }
  queried[queried_count++] = work;
  return false;
}

void host_wait(const StreamPoint& point) {
  point.stream->wait_until(point.sequence);
  host_clock_observe(point.stream->modeled_end(point.sequence));
}

double host_modeled_seconds() { return latest_clock.load(std::memory_order_relaxed); }

}  // namespace simcuda
