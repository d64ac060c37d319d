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
// stream, and waiting_for() lists it once. The other bit, kUnknownBit, says "a
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
// waits for that to finish, so the mover never waits on a handle the driver has let go of.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace vramspill::core {

class StreamSlots {
 public:
  static constexpr std::size_t kSlots = 63;
  static constexpr uint64_t kUnknownBit = uint64_t{1} << 63;

  // What a set of bits means for the mover: the streams to wait for, or the whole device.
  struct Waiting {
    std::unique_lock<std::mutex> hold;  // no stream is retired while it lives
    bool whole_device = false;
    std::vector<uint64_t> streams;  // the CUstream values, distinct; the legacy stream is 0
    uint64_t retired = 0;           // the slots retired when it was made
  };

  StreamSlots() noexcept = default;
  StreamSlots(const StreamSlots&) = delete;
  StreamSlots& operator=(const StreamSlots&) = delete;

  // The bit of `stream` as the use tracker records it (hooks/use_tracking.h's stream_id: 0 or
  // CU_STREAM_LEGACY for the legacy stream, CU_STREAM_PER_THREAD for the thread's own). Never
  // blocks; allocates nothing.
  uint64_t bit_of(uint64_t stream) noexcept;

  // The program destroyed `stream`, or every stream (a context went).
  void retire(uint64_t stream) noexcept;
  void retire_all() noexcept;

  // What `bits` ask the mover to wait for. Throws std::bad_alloc.
  Waiting waiting_for(uint64_t bits);
  // The whole device was waited for while `waiting` was held: the slots it saw retired are free.
  void device_drained(const Waiting& waiting) noexcept;

 private:
  // A slot's word: 0 free, the stream + 1 in use, kRetired retired.
  static constexpr uint64_t kRetired = ~uint64_t{0};

  void retire_slot(std::size_t slot) noexcept;

  std::array<std::atomic<uint64_t>, kSlots> slots_{};
  std::atomic<uint64_t> retired_{0};     // bit i: slot i is retired
  std::atomic<uint64_t> generation_{0};  // bumped by every retirement
  std::mutex waiting_;
};

}  // namespace vramspill::core
