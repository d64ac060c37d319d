// Streams: queues of work that run asynchronously, in order, on one worker thread per stream,
// so the ordering bugs a program (or the shim) could have on a GPU can happen here too.
//
// Each piece of work returns its modeled duration in seconds; the stream keeps a modeled clock
// (the time its last work would have finished on the modeled GPU), which cuEventElapsedTime and
// the statistics report. It is a model, never a measurement. Work starts no earlier than the
// modeled host clock of the thread that queued it (Note [Host clock] in core/host_clock.h).
//
// Each piece of work may carry its footprint, the device addresses it can touch; the stream keeps
// the footprints of its queued and running work so that a remap can be checked against them
// (Note [Remap protocol] in core/remap_check.h).
//
// Note [Stream workers]
// Every worker thread is joined or detached, never left to finish unjoined (which keeps its stack
// mapped for the rest of the process, and which ThreadSanitizer reports as a thread leak):
// - A stream the program never destroys (the default streams, and created streams still live when
//   their context goes) is stopped and joined by its destructor, at cuCtxDestroy.
// - cuStreamDestroy returns at once while the work already queued still runs, so retire() cannot
//   join: it detaches the worker, which returns once the queue is empty. The Stream object stays
//   with its context (work elsewhere may wait on it), and the context synchronises before it
//   destroys its streams, so the object outlives every job. What the worker still touches after
//   its last job (the queue, its lock and condition variables) lives in a Queue that the worker
//   owns a share of, so a detached worker that is slow to return never touches a destroyed Stream.
// Nothing joins at process exit: the driver and its primary contexts are never destroyed, and the
// default streams' workers are still running when the process ends.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace simcuda {

struct Context;
class Stream;

using StreamWork = std::function<double()>;

// "Everything queued on `stream` up to `sequence`."
struct StreamPoint {
  Stream* stream = nullptr;
  uint64_t sequence = 0;
};

struct AddressRange {
  uint64_t address = 0;
  uint64_t size = 0;
};

// What a piece of work can touch (Note [Remap protocol] in core/remap_check.h).
struct Footprint {
  const char* what = nullptr;  // "copy", "memset", "graph launch", a kernel's name: static text
  std::vector<AddressRange> ranges;
};

// Queued or running work whose footprint overlaps a range.
struct PendingOverlap {
  const char* what = nullptr;
  uint64_t stream_id = 0;
  uint64_t sequence = 0;
  bool running = false;
};

class Stream {
 public:
  enum class Kind { kCreated, kLegacyDefault, kPerThreadDefault };

  Stream(Context* context, Kind kind, unsigned int flags, int priority);
  ~Stream();  // finishes queued work first, and joins the worker unless retire() detached it
  // Lets the worker exit once the queue is empty (cuStreamDestroy returns at once, as on a GPU),
  // detached (Note [Stream workers]). The object lives on, owned by its context, so work
  // elsewhere that waits on it stays valid.
  void retire();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues `work` to run after this stream's earlier work, after every point in `waits`, and
  // not before the modeled time `not_before` (the queuing thread's host clock).
  uint64_t enqueue(StreamWork work, std::vector<StreamPoint> waits = {}, Footprint footprint = {},
                   double not_before = 0.0);
  uint64_t last_enqueued() const;
  bool reached(uint64_t sequence) const;
  void wait_until(uint64_t sequence);
  void synchronize() { wait_until(last_enqueued()); }
  StreamPoint tail() { return {this, last_enqueued()}; }
  // The first queued or running work whose footprint overlaps [address, address + size).
  std::optional<PendingOverlap> pending_overlap(uint64_t address, uint64_t size) const;

  // While a piece of work runs, its modeled start; otherwise the end of the last work run.
  double modeled_clock() const { return clock_.load(std::memory_order_acquire); }
  // The modeled end of the work up to `sequence`, which has run (reached()): what a wait for that
  // point waits until, not the stream's clock, which may include later work by then. For work
  // older than the last kEndsKept, the oldest end kept: later, so the model errs late.
  double modeled_end(uint64_t sequence) const;
  Context* context() const { return context_; }
  Kind kind() const { return kind_; }
  unsigned int flags() const { return flags_; }
  int priority() const { return priority_; }
  uint64_t id() const { return id_; }
  // Non-blocking streams (CU_STREAM_NON_BLOCKING) do not synchronise with the legacy stream.
  bool blocking() const;

 private:
  struct Job {
    uint64_t sequence;
    StreamWork work;
    std::vector<StreamPoint> waits;
    Footprint footprint;
    double not_before = 0.0;
  };
  // Shared by the stream and its worker (Note [Stream workers]).
  struct Queue {
    std::mutex mutex;
    std::condition_variable queued;
    std::condition_variable completed_cv;
    std::deque<Job> jobs;
    Footprint running;  // the footprint of the job the worker has taken, until it completes
    uint64_t enqueued = 0;
    uint64_t completed = 0;
    std::deque<double> ends;  // the modeled ends of the last completed jobs, the last at the back
    bool stopping = false;
  };
  // The worker's loop: touches `this` only inside run_job(), while a job is incomplete.
  void run(Queue& queue);
  void run_job(Job job);
  void stop();

  Context* context_;
  Kind kind_;
  unsigned int flags_;
  int priority_;
  uint64_t id_;
  std::shared_ptr<Queue> queue_;
  static constexpr std::size_t kEndsKept = 4096;
  std::atomic<double> clock_{0.0};
  std::thread worker_;
};

// On a stream's worker, the modeled start of the work it is running, or of the part of it
// running now (a graph's node); 0 on any other thread.
double running_work_start();
// Work made of parts run one after the other (a graph's nodes) moves the start its next part
// sees past the part that took `seconds`.
void running_work_took(double seconds);

}  // namespace simcuda
