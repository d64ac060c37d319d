// Which tracked allocations each submission (launch, copy, memset, graph launch) may touch, and
// each allocation's last use: what tiered mode's policy (policies/eviction_policy.h, `used`)
// learns, and what the tiered layer promotes before a launch runs. Driver-free: the hooks
// (hooks/submission_hooks.cpp) turn each call's arguments into 8-byte words or address ranges.
//
// Note [Use lookups take no lock]
// Every launch looks each aligned 8-byte word of its arguments up among the tracked ranges;
// tracking and untracking happen only when a block of at least 1 MiB is allocated or freed. So
// the ranges live in an immutable snapshot, rebuilt whole by track()/untrack() under a writer
// mutex and published with one atomic pointer; a lookup reads the pointer and never writes
// shared state except the touched blocks' own last use (and, in tracked mode, the marks of
// mark_streams(), Note [Stream slots]). The snapshot is two arrays:
// - the ranges sorted by base (copies and memsets name ranges: a binary search and a walk);
// - an open-addressed hash from each min_block_bytes-sized chunk of the address space that a
//   range covers to the first range meeting that chunk. Ranges are disjoint and each at least a
//   chunk long, so at most two ranges meet a chunk: that one and the next. A word costs a
//   subtraction and compare against the snapshot's [lowest, highest) (most arguments are not
//   pointers), then a multiply, one probe and one or two compares, whatever the number of ranges;
//   a binary search over 10^4 ranges is 14 dependent steps, 7 ns a word even when every step hits
//   the cache and is predicted (tests/shim/bench/use_tracking_bench.cpp, LookupBinarySearch).
//   Measured there: record_words of 8 words costs 16 ns with no hit (mostly the read section's
//   two atomic operations) and about 5 ns more per block hit, 10^4 ranges tracked. The table
//   holds one entry per chunk covered (16 bytes per MiB tracked), and a rebuild is O(ranges +
//   tracked bytes / chunk): about 300 us of CPU per track() or untrack() with 10^4 blocks of
//   2 MiB tracked (TrackUntrack there), paid per allocation and free of a block against launches
//   that run millions of times. Should programs with that many blocks allocate often, the
//   snapshot can be patched in place of rebuilt (ranges and chunks of one block change).
// Nothing tracked is a null snapshot: the hooks' fast path is the one relaxed load of idle().
//
// Note [Retiring a snapshot]
// A reader may still be inside the snapshot a writer replaces, so the old one (and a block record
// that untrack() removed) is freed only after a grace period. Readers announce themselves in one
// of kReaderSlots cache-line-sized counters, picked per thread round-robin: an increment (a full
// barrier) before loading the snapshot pointer, a decrement after the last access.
// The writer publishes the new pointer (sequentially consistent) and then waits until it has seen
// every counter at zero once. A reader whose counter the writer saw at zero incremented it later,
// so by the total order of sequentially consistent operations it loads the new pointer; a reader
// counted before then is what the writer waits out. Read sections are a bounded loop that never
// blocks or calls out, so the wait is short (a descheduled reader is the worst case: the writer
// yields until it runs again). More threads than slots share counters, which stays correct. A
// writer never runs inside a read section (the hooks call track()/untrack() outside them), so
// the wait cannot deadlock; the shim makes no tracking calls in a forked child (Note [Entering
// the shim] in hooks/shim_state.h), whose counters could be stuck with a vanished thread's count.
// Asymmetric fences (membarrier) would make the reader's barrier free at the price of a syscall
// per write that containers may forbid; the measured cost does not call for it.
//
// Note [Sequence numbers and last uses]
// A submission that touches a tracked block takes the next sequence number with one relaxed
// fetch_add on a shared counter (about 5 ns uncontended; submissions that touch nothing take
// none). Per-thread ranges of numbers would be cheaper under contention but would no longer order
// launches in time across threads, and recency is what the policy reads; the policy's own `used`
// serialises launches under the tiered layer's lock and costs a hundred times more. Each block's
// record keeps its last use, newest wins: stream, then sequence, each a relaxed or release store
// on the record's own cache line (no shared counter per block). Two threads touching one block at
// the same moment may leave one's stream with the other's sequence: both submissions touched the
// block, so the stream named does hold work on it. A submission the tracker cannot see into (an
// unread graph, a kernel whose parameters it cannot read) takes a sequence number and is stamped
// once for the whole tracker ("everything"), not on every block; last_use() reports whichever of
// a block's own stamp and that one is newer.
//
// Note [Counting launches]
// How many launches could not be read says whether tiered mode sees the job at all (a driver
// that refuses every layout makes every launch touch everything), so every launch is counted:
// in the calling thread's reader slot, whose cache line the launch's read section writes anyway,
// with one relaxed increment. No shared counter is written on the launch path; a reader of the
// counts sums the slots, and may see one thread's launch before its unreadable mark, never a
// count that goes down.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "core/stream_slots.h"

namespace vramspill::core {

// The policy's block id (policies/eviction_policy.h's BlockId): whatever the tiered layer names a
// tracked allocation by.
using BlockId = uint64_t;

// [base, base + size): what a copy or memset names.
struct AddressRange {
  uint64_t base = 0;
  uint64_t size = 0;
};

// `words` 8-byte words at `bytes`, which need not be aligned: one parameter of a launch, read
// where the program put it (Note [Reading a launch's arguments] in core/launch_arguments.h).
// No default member initialisers: a launch's LaunchWords holds ParamLayout::kMaxParams of them
// on the stack, set only as far as its count, and clearing them all would cost every launch.
struct WordRun {
  const void* bytes;
  size_t words;
};

// Kernel launches recorded since the tracker was made, and how many of them could not be read
// (they may touch everything). Launches made while nothing was tracked are not recorded.
struct LaunchCounts {
  uint64_t launches = 0;
  uint64_t unreadable = 0;
};

// A submission's stamp (Note [Sequence numbers and last uses]). Sequence 0: never.
struct Stamp {
  uint64_t sequence = 0;
  uint64_t stream = 0;  // the CUstream's value
};

// What one submission touched, for the hook to hand to the tiered layer before the call goes to
// the driver. Fixed capacity: filled on the launch path without allocating.
struct SubmissionUse {
  // PyTorch's multi-tensor kernels (the optimizers' foreach and fused forms) pass up to a few
  // hundred tensors to one launch, each a block of its own when large: with room for 32, such a
  // launch named the first 32 to the policy and made the tracked window wait for its stream's
  // whole queue. Not cleared per launch, so the room costs stack, not time.
  static constexpr size_t kCapacity = 256;
  // Up to this many blocks listed, a block is looked for in the list; past it, in `listed_bits`
  // first (Note [Listing many blocks] in core/use_tracker.cpp).
  static constexpr size_t kSearched = 32;
  uint64_t sequence = 0;  // 0: it touched nothing tracked
  uint64_t stream = 0;    // the stream it was submitted to, as recorded
  // It may touch tracked blocks not listed in `blocks`: an unread graph, unreadable parameters, or
  // more blocks than kCapacity (all of which are recorded all the same). The tiered layer
  // synchronises before remapping anything under such a submission.
  bool everything = false;
  uint32_t count = 0;  // blocks[0, count): distinct, in the order first touched
  std::array<BlockId, kCapacity> blocks;  // not cleared: count says what is set
  std::array<uint64_t, kCapacity> bases;  // blocks[i]'s range starts at bases[i]
  // A bit for each hash of a listed block, set once count passes kSearched (cleared then).
  std::array<uint64_t, 64> listed_bits;
};

enum class TrackResult : uint8_t {
  kTracked,
  kTooSmall,      // below min_block_bytes (Note [Use lookups take no lock] needs it)
  kOverlaps,      // meets a range already tracked, or wraps the address space
  kBlockInUse,    // the block id already names a tracked range
  kOutOfMemory,   // the new snapshot could not be allocated; nothing changed
};

class UseTracker {
 public:
  static constexpr uint64_t kDefaultMinBlockBytes = uint64_t{1} << 20;
  static constexpr size_t kReaderSlots = 64;

  // min_block_bytes: a power of two, the smallest range track() accepts; smaller values are
  // rounded up to one.
  explicit UseTracker(uint64_t min_block_bytes = kDefaultMinBlockBytes) noexcept;
  ~UseTracker();
  UseTracker(const UseTracker&) = delete;
  UseTracker& operator=(const UseTracker&) = delete;

  // Nothing tracked: one relaxed load, the hooks' fast path.
  bool idle() const noexcept { return snapshot_.load(std::memory_order_relaxed) == nullptr; }

  // Rare (a block allocated or freed): rebuild the snapshot and wait out its readers (Note
  // [Retiring a snapshot]). Never call them from inside a record_* call.
  TrackResult track(uint64_t base, uint64_t size, BlockId block) noexcept;
  // False if no tracked range starts at `base`, or (out of memory for the new snapshot) the
  // range stays tracked: the caller may try again.
  bool untrack(uint64_t base) noexcept;
  size_t tracked() const noexcept;

  // One submission on `stream`. Each fills `use` (reset first) and stamps the blocks it touched.
  // A kernel launch: its arguments as runs of 8-byte words; a word anywhere inside a range
  // counts. Counted in launch_counts().
  void record_words(uint64_t stream, std::span<const WordRun> runs, SubmissionUse& use) noexcept;
  void record_words(uint64_t stream, std::span<const uint64_t> words, SubmissionUse& use) noexcept {
    const WordRun run{words.data(), words.size()};
    record_words(stream, {&run, 1}, use);
  }
  // A kernel launch whose arguments cannot be read: record_everything(), counted as unreadable.
  void record_unreadable_launch(uint64_t stream, SubmissionUse& use) noexcept;
  // A copy or memset: every range that meets one of `ranges` (empty ones name nothing).
  void record_ranges(uint64_t stream, std::span<const AddressRange> ranges,
                     SubmissionUse& use) noexcept;
  // A graph launch whose nodes were read (core/graph_uses.h): its kernels' argument words and its
  // copies' and memsets' ranges, as one submission. Counted in launch_counts() as one launch.
  void record_graph(uint64_t stream, std::span<const uint64_t> words,
                    std::span<const AddressRange> ranges, SubmissionUse& use) noexcept;
  // A submission the tracker cannot see into: it may touch every tracked block.
  void record_everything(uint64_t stream, SubmissionUse& use) noexcept;

  // The block's last use, the newer of its own stamp and the last "everything" submission's;
  // nullopt if the block is not tracked. Takes the writer mutex: for eviction decisions, not the
  // launch path.
  std::optional<Stamp> last_use(BlockId block) const noexcept;
  Stamp last_everything() const noexcept;
  // The sum of every thread's counts (Note [Counting launches]): a loop over kReaderSlots, for
  // the stats and the log, not the launch path.
  LaunchCounts launch_counts() const noexcept;

  // Note [Stream slots] in core/stream_slots.h: `use`'s stream may now have work queued on its
  // blocks (on every block, if it touched everything). Called while the submission holds the
  // remap window, just before its driver call: a move that takes the bits after the window
  // closed then waits for that work, and one that took them earlier moved before it was queued.
  // Not at record_* time, which comes before a submission's promotions and so outside the window.
  // Counts the submission in on its stream's slot; after its driver call, the caller ends it
  // there (StreamSlots::end_call; Note [Last uses by event]). A submission that touched nothing
  // gets no mark (bit 0).
  StreamSlots::Mark mark_streams(const SubmissionUse& use) noexcept;
  // What may be queued on some blocks, for a move: the bits of the streams marked on them and
  // on every block since the last take (kUnknownBit for a block not tracked), and the highest
  // mark among them.
  struct QueuedUses {
    uint64_t bits = 0;
    uint64_t through = 0;
  };
  // Clears the bits it returns: the caller waits for those streams before it moves the blocks,
  // and calls it only while the remap window is closed. Takes the writer mutex.
  QueuedUses take_streams(std::span<const BlockId> blocks) noexcept;
  // Puts back what take_streams() returned, when the wait for it was not made or failed: every
  // later take returns it, whatever the blocks.
  void put_back_streams(const QueuedUses& queued) noexcept;
  // Whether a submission marked `block`, or every block, after `mark` (StreamSlots::last_mark()
  // when it was taken); true for a block not tracked. Marks only rise, and no take clears them.
  // Takes the writer mutex.
  bool marked_since(BlockId block, uint64_t mark) const noexcept;
  StreamSlots& stream_slots() noexcept { return stream_slots_; }

 private:
  struct Record;
  struct Snapshot;
  class ReadSection;

  // Under writer_: the snapshot of `records_` (null when empty); throws std::bad_alloc.
  const Snapshot* build() const;
  // Under writer_: publishes `next` and frees the one it replaces once no reader is inside it.
  void publish(const Snapshot* next) noexcept;
  void wait_for_readers() const noexcept;
  uint64_t next_sequence() noexcept {
    return sequence_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  void touch(Record& record, const Stamp& stamp, SubmissionUse& use) noexcept;
  // Inside a read section: touches what the words or ranges name, taking the submission's
  // sequence number on the first hit.
  void touch_words(const Snapshot& snapshot, std::span<const WordRun> runs, Stamp& stamp,
                   SubmissionUse& use) noexcept;
  void touch_ranges(const Snapshot& snapshot, std::span<const AddressRange> ranges, Stamp& stamp,
                    SubmissionUse& use) noexcept;
  void stamp_everything(const Stamp& stamp) noexcept;

  // A thread's slot (Note [Retiring a snapshot]), which also counts its launches (Note
  // [Counting launches]): its cache line is the one the launch writes anyway.
  struct alignas(64) ReaderSlot {
    std::atomic<uint64_t> readers{0};
    std::atomic<uint64_t> launches{0};
    std::atomic<uint64_t> unreadable_launches{0};
  };
  ReaderSlot& this_threads_slot() const noexcept;

  std::atomic<const Snapshot*> snapshot_{nullptr};
  const uint32_t chunk_shift_;
  alignas(64) std::atomic<uint64_t> sequence_{0};
  alignas(64) std::atomic<uint64_t> everything_sequence_{0};
  std::atomic<uint64_t> everything_stream_{0};
  std::atomic<uint64_t> everything_streams_{0};  // stream bits, since the last take_streams()
  std::atomic<uint64_t> everything_through_{0};  // the highest mark of those
  StreamSlots stream_slots_;
  mutable std::array<ReaderSlot, kReaderSlots> reader_slots_{};  // readers count in const calls
  mutable std::mutex writer_;
  std::map<uint64_t, Record*> records_;  // by base; owned, under writer_
  std::unordered_map<BlockId, Record*> by_block_;  // the same records, under writer_
};

}  // namespace vramspill::core
