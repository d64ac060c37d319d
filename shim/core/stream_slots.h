// Which streams may have queued work on a tracked block: each stream the use tracker sees takes
// one of 63 slots, and a block remembers the slots of the streams that used it as the bits of one
// word. What the tracked remap window waits for (Note [The tracked window] in
// placement/tracked_work.h). Driver-free: streams are the CUstream values the hooks record.
//
// Note [Stream slots]
// A submission that touches a tracked block marks its stream's bit on the block while it holds
// the remap window (UseTracker::mark_streams, in tracked mode only). It finds the bit in a
// thread-local cache (the stream and the slots' generation; one compare each) or by scanning the
// 63 slot words, and claims a free slot with a compare-and-swap the first time a stream is seen.
// Two threads that claim slots for one new stream at once may give it two slots: both name the same
// stream, and the mover waits for each. The other bit, kUnknownBit, says "a
// stream the mover cannot wait on by itself": the thread's per-thread default stream (it names
// another stream on the mover's thread), or any stream once every slot is taken; a move that meets
// it waits for the whole device. A destroyed stream cannot be waited on (its handle is gone; its
// queued work still runs). So when the program destroys a stream (or a context, with all its
// streams) its slot is retired: the bit, wherever blocks still hold it, then also means "wait for
// the whole device". A retired slot is free again once the whole device has been waited for after
// it was retired, when its old work is certainly done; a block that still holds its bit then only
// waits on whichever stream takes the slot next, which is correct, if sometimes longer than needed.
// Retiring bumps the generation, so that no thread's cache hands out a retired slot. The mover
// holds a Waiting while it turns bits into streams and waits on them: a stream destroyed meanwhile
// waits for that to finish, so the mover does not wait on a handle the driver has let go of, as
// far as the shim sees the program let go: cuStreamDestroy, cuCtxDestroy_v2, and every
// cuDevicePrimaryCtxReset and cuDevicePrimaryCtxRelease retire slots (hooks/stream_end_hooks.cpp);
// green contexts, and the CUDA 2.0 cuCtxDestroy export, are not seen. "The whole device" is one
// device: the tracked window waits this way only while one device has an arena (Note [The
// tracked window]), so a drained device has drained every slot's work.
//
// Note [Last uses by event]
// Waiting for a whole stream is no better than the safe window for a job that runs on one stream
// (most of them): the move would wait for everything queued. What it needs is the end of the
// moving blocks' last uses. So every submission gets a mark, one global counter taken while it
// holds the window, and a block keeps the highest mark of the submissions that marked it. After
// its driver call, a submission records an event on its stream, into a ring of kRing per slot,
// when its slot has had kRecordEvery submissions since the last and no other submission of the slot
// is inside its driver call (each submission is counted on its slot from before it takes its mark
// to after its call): then every submission of the slot with a lower mark has queued its work,
// and the event, labelled with the mark, follows all of it. A move needing the blocks' marks up
// to M waits, on each of their streams, for the oldest event of the ring labelled M or later, and
// for the whole stream only if there is none: with a backlog queued, it waits until the device
// reaches the last use, and the copy then overlaps the work queued after it. The mover reads
// the rings with the window closed, when no submission is recording. A ring keeps the context its
// first event was recorded in; an event of another context (each context has a legacy stream,
// and all of them share the legacy stream's slot) is not kept, and the slot then means the whole
// device for good, as its events no longer say whose work they follow. So does a submission to
// the legacy stream with another context current (submitted_in()): told at its mark, not at an
// event, since a move between two events would otherwise wait for the first context's event
// after a use queued in the second. No event is recorded
// while a stream capture is in progress, nor on a stream the driver says captures (one that began
// after the shim's test: driver/stream_capture.h): it would be captured into the graph, where no
// move could wait for it, and one on the legacy stream would invalidate a global-mode capture.
// A destroyed stream's events are destroyed with its slot's retirement; a destroyed or released
// context's are forgotten, not destroyed (the driver took those of that context with it; those of
// others leak, a few events).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "util/stream_end.h"

namespace vramspill::core {

class StreamSlots {
 public:
  static constexpr std::size_t kSlots = 63;
  static constexpr uint64_t kUnknownBit = uint64_t{1} << 63;

  static constexpr std::size_t kRing = 8;
  static constexpr uint64_t kRecordEvery = 4;

  // What a set of bits means for the mover: the stream ends to wait for, or the whole device.
  struct Waiting {
    std::unique_lock<std::mutex> hold;  // no stream is retired while it lives
    bool whole_device = false;
    std::vector<StreamEnd> ends;  // one per slot
    uint64_t retired = 0;         // the slots retired when it was made
  };

  // A submission's place (Note [Last uses by event]): its stream's bit and its mark.
  struct Mark {
    uint64_t bit = 0;
    uint64_t value = 0;
  };
  // An event due on a slot after a submission: record `event` (0: make one first) on the
  // submission's stream, then call recorded().
  struct Recording {
    std::size_t slot = 0;
    std::size_t entry = 0;
    uint64_t event = 0;
    uint64_t mark = 0;
  };

  StreamSlots() noexcept;
  StreamSlots(const StreamSlots&) = delete;
  StreamSlots& operator=(const StreamSlots&) = delete;

  // The bit of `stream` as the use tracker records it (hooks/use_tracking.h's stream_id: 0 or
  // CU_STREAM_LEGACY for the legacy stream, CU_STREAM_PER_THREAD for the thread's own). Never
  // blocks; allocates nothing.
  uint64_t bit_of(uint64_t stream) noexcept;

  // The program destroyed `stream` (its slot's events go to `destroy`), or every stream (a
  // context went; the events are forgotten).
  void retire(uint64_t stream, void (*destroy)(uint64_t event)) noexcept;
  void retire_all() noexcept;

  // Inside the window, before the driver call: counts the submission in on the slot of `bit`
  // and gives it the next mark.
  Mark begin_call(uint64_t bit) noexcept;
  // The highest mark handed out so far: every later submission gets a higher one.
  uint64_t last_mark() const noexcept { return marks_.load(std::memory_order_seq_cst); }
  // A submission marked `mark` on `stream` was made with `context` current: on the legacy stream,
  // a second context makes its slot the whole device (Note [Last uses by event]). Never blocks.
  void submitted_in(const Mark& mark, uint64_t stream, uint64_t context) noexcept;
  // Whether `stream` (as bit_of() takes it) is the legacy stream, whose slot every context shares.
  static bool names_legacy_stream(uint64_t stream) noexcept;
  // After the driver call, still inside the window: the event to record if one is due (then
  // recorded() must follow), else nullopt and the submission is counted out of its slot.
  std::optional<Recording> end_call(const Mark& mark) noexcept;
  // The event of `recording` now follows its submission on the stream, in `context` (the
  // CUcontext current when it was recorded); event 0: it could not be recorded, and the entry is
  // dropped. Counts the submission out of its slot. Whether the event was kept: a slot whose
  // events came from two contexts (the legacy stream of each) keeps none and means the whole
  // device from then on, and the caller destroys the event.
  bool recorded(const Recording& recording, uint64_t event, uint64_t context) noexcept;

  // What `bits` ask the mover to wait for, for the submissions marked up to `through`. Throws
  // std::bad_alloc.
  Waiting waiting_for(uint64_t bits, uint64_t through);
  // The whole device was waited for while `waiting` was held: the slots it saw retired are free.
  void device_drained(const Waiting& waiting) noexcept;

 private:
  // A slot's word: 0 free, the stream + 1 in use, kRetired retired.
  static constexpr uint64_t kRetired = ~uint64_t{0};

  // One slot's recorded events (Note [Last uses by event]).
  struct Ring {
    struct Entry {
      std::atomic<uint64_t> event{0};
      std::atomic<uint64_t> mark{0};  // 0: nothing recorded
    };
    std::array<Entry, kRing> entries{};
    std::atomic<uint32_t> in_call{0};      // submissions between begin_call() and their end
    std::atomic<uint32_t> since_event{0};  // submissions since the last event
    std::atomic<std::size_t> next{0};
    std::atomic<uint64_t> context{0};  // the context of its events
    std::atomic<bool> mixed{false};    // events from two contexts were offered
  };

  static std::optional<std::size_t> slot_of(uint64_t bit) noexcept;
  // Retires the slot; its events go to `destroy`, or are forgotten when it is null.
  void retire_slot(std::size_t slot, void (*destroy)(uint64_t event)) noexcept;
  uint64_t event_after(std::size_t slot, uint64_t through) const noexcept;

  std::array<std::atomic<uint64_t>, kSlots> slots_{};
  std::array<Ring, kSlots> rings_{};
  std::atomic<uint64_t> marks_{0};
  std::atomic<uint64_t> retired_{0};     // bit i: slot i is retired
  std::atomic<uint64_t> generation_{0};  // bumped by every retirement
  const uint64_t id_;                    // tells thread-local caches which object they are for
  std::mutex waiting_;
};

}  // namespace vramspill::core
