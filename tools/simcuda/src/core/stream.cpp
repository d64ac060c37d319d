#include "core/stream.h"

#include <cuda.h>

#include <algorithm>

namespace simcuda {
namespace {
std::atomic<uint64_t> next_stream_id{1};
}

Stream::Stream(Context* context, Kind kind, unsigned int flags, int priority)
    : context_(context),
      kind_(kind),
      flags_(flags),
      priority_(priority),
      id_(next_stream_id.fetch_add(1, std::memory_order_relaxed)) {
  worker_ = std::thread([this] { run(); });
}

Stream::~Stream() {
  retire();
  worker_.join();
}

void Stream::retire() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_one();
}

bool Stream::blocking() const { return (flags_ & CU_STREAM_NON_BLOCKING) == 0; }

uint64_t Stream::enqueue(StreamWork work, std::vector<StreamPoint> waits) {
  uint64_t sequence = 0;
  {
    std::lock_guard lock(mutex_);
    sequence = ++enqueued_;
    jobs_.push_back({sequence, std::move(work), std::move(waits)});
  }
  queued_.notify_one();
  return sequence;
}

uint64_t Stream::last_enqueued() const {
  std::lock_guard lock(mutex_);
  return enqueued_;
}

bool Stream::reached(uint64_t sequence) const {
  std::lock_guard lock(mutex_);
  return completed_ >= sequence;
}

void Stream::wait_until(uint64_t sequence) {
  std::unique_lock lock(mutex_);
  completed_cv_.wait(lock, [&] { return completed_ >= sequence; });
}

void Stream::run() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and everything queued has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    // The modeled start is when this stream and everything it waits for are done. Another
    // stream's clock may already include later work than the point waited for, so the model
    // errs towards later starts.
    double start = modeled_clock();
    for (const StreamPoint& point : job.waits) {
      point.stream->wait_until(point.sequence);
      start = std::max(start, point.stream->modeled_clock());
    }
    // Work that reads the clock while it runs (an event record) sees its own modeled start.
    clock_.store(start, std::memory_order_release);
    const double duration = job.work ? job.work() : 0.0;
    clock_.store(start + duration, std::memory_order_release);
    {
      std::lock_guard lock(mutex_);
      completed_ = job.sequence;
    }
    completed_cv_.notify_all();
  }
}

}  // namespace simcuda
