#include "core/stream.h"

#include <cuda.h>

#include <algorithm>

namespace simcuda {
namespace {
std::atomic<uint64_t> next_stream_id{1};
// The modeled start of the work this stream worker runs (Note [Waiting for a prefetch]).
thread_local double running_start = 0.0;
}  // namespace

double running_work_start() { return running_start; }

void running_work_took(double seconds) { running_start += seconds; }

Stream::Stream(Context* context, Kind kind, unsigned int flags, int priority)
    : context_(context),
      kind_(kind),
      flags_(flags),
      priority_(priority),
      id_(next_stream_id.fetch_add(1, std::memory_order_relaxed)),
      queue_(std::make_shared<Queue>()) {
  // The worker keeps its own share of the queue (Note [Stream workers]).
  worker_ = std::thread([this, queue = queue_] { run(*queue); });
}

Stream::~Stream() {
  if (worker_.joinable()) {
    stop();
    worker_.join();
  } else {
    synchronize();  // retired: its detached worker may still be running the last jobs
  }
}

void Stream::stop() {
  {
    std::lock_guard lock(queue_->mutex);
    queue_->stopping = true;
  }
  queue_->queued.notify_one();
}

void Stream::retire() {
  stop();
  // Context::retire_stream serialises the calls; a second cuStreamDestroy of the same stream,
  // racing the first past the handle check, finds the worker detached already.
  if (worker_.joinable()) worker_.detach();
}

bool Stream::blocking() const { return (flags_ & CU_STREAM_NON_BLOCKING) == 0; }

uint64_t Stream::enqueue(StreamWork work, std::vector<StreamPoint> waits, Footprint footprint,
                         double not_before) {
  uint64_t sequence = 0;
  {
    std::lock_guard lock(queue_->mutex);
    sequence = ++queue_->enqueued;
    queue_->jobs.push_back(
        {sequence, std::move(work), std::move(waits), std::move(footprint), not_before});
  }
  queue_->queued.notify_one();
  return sequence;
}

uint64_t Stream::last_enqueued() const {
  std::lock_guard lock(queue_->mutex);
  return queue_->enqueued;
}

namespace {
bool overlaps(const Footprint& footprint, uint64_t address, uint64_t size) {
  for (const AddressRange& range : footprint.ranges)
    if (range.address < address + size && address < range.address + range.size) return true;
  return false;
}
}  // namespace

std::optional<PendingOverlap> Stream::pending_overlap(uint64_t address, uint64_t size) const {
  std::lock_guard lock(queue_->mutex);
  if (overlaps(queue_->running, address, size))  // empty while no job runs
    return PendingOverlap{queue_->running.what, id_, queue_->completed + 1, /*running=*/true};
  for (const Job& job : queue_->jobs)
    if (overlaps(job.footprint, address, size))
      return PendingOverlap{job.footprint.what, id_, job.sequence, /*running=*/false};
  return std::nullopt;
}

bool Stream::reached(uint64_t sequence) const {
  std::lock_guard lock(queue_->mutex);
  return queue_->completed >= sequence;
}

double Stream::modeled_end(uint64_t sequence) const {
  std::lock_guard lock(queue_->mutex);
  // ends.back() is job `completed`'s, and the ones before it are consecutive.
  const uint64_t back = queue_->completed;
  if (sequence == 0 || queue_->ends.empty()) return 0.0;
  const uint64_t behind = back - std::min(sequence, back);
  return behind < queue_->ends.size() ? queue_->ends[queue_->ends.size() - 1 - behind]
                                      : queue_->ends.front();
}

void Stream::wait_until(uint64_t sequence) {
  std::unique_lock lock(queue_->mutex);
  queue_->completed_cv.wait(lock, [&] { return queue_->completed >= sequence; });
}

void Stream::run(Queue& queue) {
  while (true) {
    Job job;
    {
      std::unique_lock lock(queue.mutex);
      queue.queued.wait(lock, [&] { return queue.stopping || !queue.jobs.empty(); });
      if (queue.jobs.empty()) return;  // stopping, and everything queued has run
      job = std::move(queue.jobs.front());
      queue.jobs.pop_front();
      queue.running = std::move(job.footprint);
    }
    const uint64_t sequence = job.sequence;
    run_job(std::move(job));  // destroys the work too, while its stream surely exists
    {
      std::lock_guard lock(queue.mutex);
      queue.completed = sequence;
      queue.running = {};
      queue.ends.push_back(clock_.load(std::memory_order_acquire));
      if (queue.ends.size() > kEndsKept) queue.ends.pop_front();
    }
    // From here on a retired stream may be destroyed at any moment: only `queue` is used.
    queue.completed_cv.notify_all();
  }
}

void Stream::run_job(Job job) {
  // The modeled start is when this stream and everything it waits for are done, and not before
  // the host queued it (Note [Host clock] in host_clock.h). A point waited for on another stream
  // counts from when its own work ended, whatever that stream has run since.
  double start = std::max(modeled_clock(), job.not_before);
  for (const StreamPoint& point : job.waits) {
    point.stream->wait_until(point.sequence);
    start = std::max(start, point.stream->modeled_end(point.sequence));
  }
  // Work that reads the clock while it runs (an event record) sees its own modeled start.
  clock_.store(start, std::memory_order_release);
  running_start = start;
  const double duration = job.work ? job.work() : 0.0;
  clock_.store(start + duration, std::memory_order_release);
}

}  // namespace simcuda
