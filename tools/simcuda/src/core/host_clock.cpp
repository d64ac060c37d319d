#include "core/host_clock.h"

#include <atomic>

namespace simcuda {
namespace {

thread_local double thread_clock = 0.0;
std::atomic<double> latest_clock{0.0};

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

void host_wait(const StreamPoint& point) {
  point.stream->wait_until(point.sequence);
  host_clock_observe(point.stream->modeled_end(point.sequence));
}

double host_modeled_seconds() { return latest_clock.load(std::memory_order_relaxed); }

}  // namespace simcuda
