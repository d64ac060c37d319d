#include "core/host_clock.h"

#include <array>
#include <atomic>
#include <cstddef>

namespace simcuda {
namespace {

thread_local double thread_clock = 0.0;
std::atomic<double> latest_clock{0.0};

// The thread's driver calls, and the run of queries it is in: the works queried since the last
// call that was not a query (the count of calls when the last query came).
thread_local uint64_t calls = 0;
thread_local uint64_t last_query_call = 0;
thread_local std::array<uint64_t, 16> queried{};
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

void host_clock_note_call() noexcept { ++calls; }

bool host_clock_query_sees(uint64_t work, double modeled_end) noexcept {
  // The query's own call is the one just counted: the run goes on when the last call before it
  // was a query too.
  if (last_query_call + 1 != calls) queried_count = 0;
  last_query_call = calls;
  if (modeled_end <= thread_clock) return true;
  for (std::size_t i = 0; i < queried_count; ++i) {
    if (queried[i] != work) continue;
    host_clock_observe(modeled_end);  // polled until done: waited for
    return true;
  }
  if (queried_count < queried.size()) queried[queried_count++] = work;
  return false;
}

void host_wait(const StreamPoint& point) {
  point.stream->wait_until(point.sequence);
  host_clock_observe(point.stream->modeled_end(point.sequence));
}

double host_modeled_seconds() { return latest_clock.load(std::memory_order_relaxed); }

}  // namespace simcuda
