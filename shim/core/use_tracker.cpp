#include "core/use_tracker.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace vramspill::core {

struct alignas(64) UseTracker::Record {
  Record(uint64_t record_base, uint64_t record_end, BlockId record_block) noexcept
      : base(record_base), end(record_end), block(record_block) {}
  const uint64_t base;
  const uint64_t end;
  const BlockId block;
  // Its own cache line: launches on different blocks never share one (Note [Sequence numbers
  // and last uses]).
  std::atomic<uint64_t> sequence{0};
  std::atomic<uint64_t> stream{0};
  std::atomic<uint64_t> streams{0};  // the bits of the streams marked on it (Note [Stream slots])
  std::atomic<uint64_t> through{0};  // the highest mark (Note [Last uses by event])
};

namespace {

struct Range {
  uint64_t base;
  uint64_t end;
};

// A chunk's slot in the hash (Note [Use lookups take no lock]): key is the chunk number plus one
// (0: empty), first the index of the first range meeting the chunk.
struct ChunkSlot {
  uint64_t key = 0;
  uint64_t first = 0;
};

constexpr uint64_t kHashMultiplier = 0x9E3779B97F4A7C15;  // Fibonacci hashing

// initial-exec: the preloaded library is in the initial TLS block (as in hooks/shim_state.cpp).
__attribute__((tls_model("initial-exec"))) thread_local uint32_t reader_slot_plus_one = 0;
constinit std::atomic<uint32_t> next_reader_slot{0};

size_t this_threads_reader_slot() noexcept {
  if (reader_slot_plus_one == 0) [[unlikely]]
    reader_slot_plus_one =
        next_reader_slot.fetch_add(1, std::memory_order_relaxed) % UseTracker::kReaderSlots + 1;
  return reader_slot_plus_one - 1;
}

}  // namespace

struct UseTracker::Snapshot {
  uint64_t lowest = 0;  // [lowest, lowest + span): every range lies inside
  uint64_t span = 0;
  uint32_t chunk_shift = 0;
  uint32_t hash_shift = 0;  // 64 - log2(table size)
  uint64_t mask = 0;        // table size - 1
  std::vector<Range> ranges;     // sorted by base, disjoint
  std::vector<Record*> records;  // records[i] is ranges[i]'s
  std::vector<ChunkSlot> table;

  size_t home(uint64_t chunk) const noexcept {
    return static_cast<size_t>((chunk * kHashMultiplier) >> hash_shift);
  }

  // The index of the range that holds `word`, or ranges.size().
  size_t find(uint64_t word) const noexcept {
    if (word - lowest >= span) return ranges.size();
    const uint64_t key = (word >> chunk_shift) + 1;
    for (size_t slot = home(key - 1);; slot = (slot + 1) & mask) {
      const ChunkSlot& candidate = table[slot];
      if (candidate.key == 0) return ranges.size();
      if (candidate.key != key) continue;
      // At most two ranges meet a chunk: the first and the next.
      const size_t last = std::min(candidate.first + 2, ranges.size());
      for (size_t index = candidate.first; index < last; ++index)
        if (word >= ranges[index].base && word < ranges[index].end) return index;
      return ranges.size();
    }
  }

  // The index of the first range that ends after `address`.
  size_t first_ending_after(uint64_t address) const noexcept {
    auto after = std::upper_bound(ranges.begin(), ranges.end(), address,
                                  [](uint64_t value, const Range& range) { return value < range.base; });
    if (after != ranges.begin() && std::prev(after)->end > address) --after;
    return static_cast<size_t>(after - ranges.begin());
  }
};

// Note [Retiring a snapshot]: the reader's side.
class UseTracker::ReadSection {
 public:
  explicit ReadSection(const UseTracker& tracker) noexcept
      : ReadSection(tracker, tracker.this_threads_slot()) {}
  ReadSection(const UseTracker& tracker, ReaderSlot& slot) noexcept : readers_(slot.readers) {
    readers_.fetch_add(1, std::memory_order_seq_cst);
    snapshot_ = tracker.snapshot_.load(std::memory_order_seq_cst);
  }
  ~ReadSection() { readers_.fetch_sub(1, std::memory_order_release); }
  ReadSection(const ReadSection&) = delete;
  ReadSection& operator=(const ReadSection&) = delete;

  const Snapshot* snapshot() const noexcept { return snapshot_; }

 private:
  std::atomic<uint64_t>& readers_;
  const Snapshot* snapshot_ = nullptr;
};

UseTracker::ReaderSlot& UseTracker::this_threads_slot() const noexcept {
  return reader_slots_[this_threads_reader_slot()];
}

UseTracker::UseTracker(uint64_t min_block_bytes) noexcept
    : chunk_shift_(static_cast<uint32_t>(std::countr_zero(std::bit_ceil(
          std::max<uint64_t>(min_block_bytes, 1))))) {}

UseTracker::~UseTracker() {
  delete snapshot_.load(std::memory_order_relaxed);
  for (const auto& [base, record] : records_) delete record;
}

const UseTracker::Snapshot* UseTracker::build() const {
  if (records_.empty()) return nullptr;
  auto snapshot = std::make_unique<Snapshot>();
  snapshot->chunk_shift = chunk_shift_;
  snapshot->ranges.reserve(records_.size());
  snapshot->records.reserve(records_.size());
  uint64_t chunks = 0;
  for (const auto& [base, record] : records_) {
    snapshot->ranges.push_back({record->base, record->end});
    snapshot->records.push_back(record);
    chunks += ((record->end - 1) >> chunk_shift_) - (record->base >> chunk_shift_) + 1;
  }
  snapshot->lowest = snapshot->ranges.front().base;
  snapshot->span = snapshot->ranges.back().end - snapshot->lowest;
  // At most half full, so a miss ends at an empty slot after a probe or two.
  const uint64_t size = std::bit_ceil(std::max<uint64_t>(2 * chunks, 16));
  snapshot->hash_shift = static_cast<uint32_t>(64 - std::countr_zero(size));
  snapshot->mask = size - 1;
  snapshot->table.resize(size);
  for (size_t index = 0; index < snapshot->ranges.size(); ++index) {
    const Range& range = snapshot->ranges[index];
    for (uint64_t chunk = range.base >> chunk_shift_; chunk <= (range.end - 1) >> chunk_shift_;
         ++chunk) {
      size_t slot = snapshot->home(chunk);
      while (snapshot->table[slot].key != 0 && snapshot->table[slot].key != chunk + 1)
        slot = (slot + 1) & snapshot->mask;
      // Ranges come in order: a chunk already present keeps the first range that met it.
      if (snapshot->table[slot].key == 0) snapshot->table[slot] = {chunk + 1, index};
    }
  }
  return snapshot.release();
}

void UseTracker::publish(const Snapshot* next) noexcept {
  const Snapshot* old = snapshot_.exchange(next, std::memory_order_seq_cst);
  wait_for_readers();
  delete old;
}

void UseTracker::wait_for_readers() const noexcept {
  for (const ReaderSlot& slot : reader_slots_) {
    for (int spins = 0; slot.readers.load(std::memory_order_seq_cst) != 0; ++spins)
      if (spins >= 64) std::this_thread::yield();
  }
}

TrackResult UseTracker::track(uint64_t base, uint64_t size, BlockId block) noexcept {
  if (size < (uint64_t{1} << chunk_shift_)) return TrackResult::kTooSmall;
  if (base + size < base) return TrackResult::kOverlaps;
  const std::lock_guard lock(writer_);
  const auto next = records_.lower_bound(base);
  if (next != records_.end() && next->first < base + size) return TrackResult::kOverlaps;
  if (next != records_.begin() && std::prev(next)->second->end > base)
    return TrackResult::kOverlaps;
  if (by_block_.contains(block)) return TrackResult::kBlockInUse;
  auto* record = new (std::nothrow) Record(base, base + size, block);
  if (record == nullptr) return TrackResult::kOutOfMemory;
  try {
    records_.emplace(base, record);
    try {
      by_block_.emplace(block, record);
      try {
        publish(build());
        return TrackResult::kTracked;
      } catch (const std::bad_alloc&) {
        by_block_.erase(block);
        throw;
      }
    } catch (const std::bad_alloc&) {
      records_.erase(base);
      throw;
    }
  } catch (const std::bad_alloc&) {
    delete record;
    return TrackResult::kOutOfMemory;
  }
}

bool UseTracker::untrack(uint64_t base) noexcept {
  const std::lock_guard lock(writer_);
  const auto found = records_.find(base);
  if (found == records_.end()) return false;
  Record* record = found->second;
  auto node = records_.extract(found);  // kept, so that putting it back cannot fail
  try {
    publish(build());
  } catch (const std::bad_alloc&) {
    records_.insert(std::move(node));
    return false;
  }
  by_block_.erase(record->block);
  delete record;  // publish() waited out every reader that could still reach it
  return true;
}

size_t UseTracker::tracked() const noexcept {
  const std::lock_guard lock(writer_);
  return records_.size();
}

// Note [Listing many blocks]
// A block a launch names twice is listed once, so each block touched must be looked for among
// those listed. A search of the list is the fastest way for the few blocks most launches name,
// but a multi-tensor kernel names hundreds, and searching for each would cost such a launch the
// square of its blocks (7 us for 256). So past SubmissionUse::kSearched blocks the use keeps a
// filter, one bit for each of 4 096 hashes of a block id, cleared and filled from the list when
// the list first grows past kSearched: a block whose bit is clear was never listed, and only one
// whose bit is set (listed, or a hash shared with one that is) is searched for. Launches of
// kSearched blocks or fewer never touch the filter.
namespace {

constexpr uint64_t kListedBits = 64 * 64;

uint64_t listed_bit(BlockId block) noexcept {
  // The shim's blocks are bases of 2 MiB-aligned ranges, whose low 21 bits are all zero: those
  // above are folded in before the multiplicative hash takes its top 12 bits.
  return ((block ^ (block >> 21)) * 0x9E3779B97F4A7C15ULL) >> (64 - 12);
}

void mark_listed(SubmissionUse& use, BlockId block) noexcept {
  const uint64_t bit = listed_bit(block);
  use.listed_bits[bit / 64] |= uint64_t{1} << (bit % 64);
}

bool listed(const SubmissionUse& use, BlockId block) noexcept {
  const auto end = use.blocks.begin() + use.count;
  if (use.count > SubmissionUse::kSearched) {
    const uint64_t bit = listed_bit(block);
    if ((use.listed_bits[bit / 64] >> (bit % 64) & 1) == 0) return false;
  }
  return std::find(use.blocks.begin(), end, block) != end;
}

// Lists `block` at `base`, filling the filter once the list grows past kSearched.
void list(SubmissionUse& use, BlockId block, uint64_t base) noexcept {
  use.bases[use.count] = base;
  use.blocks[use.count++] = block;
  if (use.count == SubmissionUse::kSearched + 1) {
    use.listed_bits.fill(0);
    for (uint32_t i = 0; i < use.count; ++i) mark_listed(use, use.blocks[i]);
  } else if (use.count > SubmissionUse::kSearched) {
    mark_listed(use, block);
  }
}

static_assert(kListedBits == sizeof(SubmissionUse::listed_bits) * 8);

}  // namespace

void UseTracker::touch(Record& record, const Stamp& stamp, SubmissionUse& use) noexcept {
  if (listed(use, record.block)) return;
  if (use.count < SubmissionUse::kCapacity) {
    list(use, record.block, record.base);
  } else if (!use.everything) {
    use.everything = true;
    stamp_everything(stamp);
  }
  if (record.sequence.load(std::memory_order_relaxed) < stamp.sequence) {
    record.stream.store(stamp.stream, std::memory_order_relaxed);
    record.sequence.store(stamp.sequence, std::memory_order_release);
  }
}

void UseTracker::stamp_everything(const Stamp& stamp) noexcept {
  if (everything_sequence_.load(std::memory_order_relaxed) < stamp.sequence) {
    everything_stream_.store(stamp.stream, std::memory_order_relaxed);
    everything_sequence_.store(stamp.sequence, std::memory_order_release);
  }
}

namespace {

void reset(SubmissionUse& use, uint64_t stream) noexcept {
  use.sequence = 0;
  use.stream = stream;
  use.everything = false;
  use.count = 0;
}

}  // namespace

void UseTracker::touch_words(const Snapshot& snapshot, std::span<const WordRun> runs,
                             Stamp& stamp, SubmissionUse& use) noexcept {
  for (const WordRun& run : runs) {
    const auto* bytes = static_cast<const unsigned char*>(run.bytes);
    for (size_t index = 0; index < run.words; ++index) {
      uint64_t word;  // a load: the program's argument memory need not be aligned
      std::memcpy(&word, bytes + index * sizeof word, sizeof word);
      const size_t found = snapshot.find(word);
      if (found == snapshot.ranges.size()) continue;
      if (stamp.sequence == 0) stamp.sequence = use.sequence = next_sequence();
      touch(*snapshot.records[found], stamp, use);
    }
  }
}

void UseTracker::touch_ranges(const Snapshot& snapshot, std::span<const AddressRange> ranges,
                              Stamp& stamp, SubmissionUse& use) noexcept {
  for (const AddressRange& range : ranges) {
    if (range.size == 0) continue;
    // A range past the end of the address space is cut there.
    const uint64_t end = range.base + range.size < range.base ? UINT64_MAX : range.base + range.size;
    for (size_t index = snapshot.first_ending_after(range.base);
         index < snapshot.ranges.size() && snapshot.ranges[index].base < end; ++index) {
      if (stamp.sequence == 0) stamp.sequence = use.sequence = next_sequence();
      touch(*snapshot.records[index], stamp, use);
    }
  }
}

void UseTracker::record_words(uint64_t stream, std::span<const WordRun> runs,
                              SubmissionUse& use) noexcept {
  reset(use, stream);
  ReaderSlot& slot = this_threads_slot();
  slot.launches.fetch_add(1, std::memory_order_relaxed);  // Note [Counting launches]
  const ReadSection section(*this, slot);
  if (const Snapshot* snapshot = section.snapshot(); snapshot != nullptr) {
    Stamp stamp{0, stream};
    touch_words(*snapshot, runs, stamp, use);
  }
}

void UseTracker::record_ranges(uint64_t stream, std::span<const AddressRange> ranges,
                               SubmissionUse& use) noexcept {
  reset(use, stream);
  const ReadSection section(*this);
  if (const Snapshot* snapshot = section.snapshot(); snapshot != nullptr) {
    Stamp stamp{0, stream};
    touch_ranges(*snapshot, ranges, stamp, use);
  }
}

void UseTracker::record_graph(uint64_t stream, std::span<const uint64_t> words,
                              std::span<const AddressRange> ranges, SubmissionUse& use) noexcept {
  reset(use, stream);
  ReaderSlot& slot = this_threads_slot();
  slot.launches.fetch_add(1, std::memory_order_relaxed);  // Note [Counting launches]
  const ReadSection section(*this, slot);
  if (const Snapshot* snapshot = section.snapshot(); snapshot != nullptr) {
    Stamp stamp{0, stream};  // one sequence number for the whole graph
    const WordRun run{words.data(), words.size()};
    touch_words(*snapshot, {&run, 1}, stamp, use);
    touch_ranges(*snapshot, ranges, stamp, use);
  }
}

void UseTracker::record_everything(uint64_t stream, SubmissionUse& use) noexcept {
  reset(use, stream);
  use.everything = true;
  use.sequence = next_sequence();
  stamp_everything({use.sequence, stream});
}

void UseTracker::record_unreadable_launch(uint64_t stream, SubmissionUse& use) noexcept {
  ReaderSlot& slot = this_threads_slot();
  // The launch first, so that a reader never sees more unreadable launches than launches.
  slot.launches.fetch_add(1, std::memory_order_relaxed);
  slot.unreadable_launches.fetch_add(1, std::memory_order_release);
  record_everything(stream, use);
}

LaunchCounts UseTracker::launch_counts() const noexcept {
  LaunchCounts counts;
  for (const ReaderSlot& slot : reader_slots_) {
    counts.unreadable += slot.unreadable_launches.load(std::memory_order_acquire);
    counts.launches += slot.launches.load(std::memory_order_relaxed);
  }
  return counts;
}

std::optional<Stamp> UseTracker::last_use(BlockId block) const noexcept {
  const Stamp everything = last_everything();
  const std::lock_guard lock(writer_);
  const auto found = by_block_.find(block);
  if (found == by_block_.end()) return std::nullopt;
  const Record& record = *found->second;
  const Stamp own{record.sequence.load(std::memory_order_acquire),
                  record.stream.load(std::memory_order_relaxed)};
  return own.sequence >= everything.sequence ? own : everything;
}

namespace {

// Most submissions find their stream's bit set already: a load, and no write to the line.
void set_bits(std::atomic<uint64_t>& word, uint64_t bits) noexcept {
  if ((word.load(std::memory_order_relaxed) & bits) != bits)
    word.fetch_or(bits, std::memory_order_relaxed);
}

// Two submissions marking one block at once must leave the higher mark.
void raise_to(std::atomic<uint64_t>& word, uint64_t mark) noexcept {
  uint64_t now = word.load(std::memory_order_relaxed);
  while (now < mark && !word.compare_exchange_weak(now, mark, std::memory_order_relaxed)) {
  }
}

}  // namespace

StreamSlots::Mark UseTracker::mark_streams(const SubmissionUse& use) noexcept {
  if (use.count == 0 && !use.everything) return {};
  const StreamSlots::Mark mark = stream_slots_.begin_call(stream_slots_.bit_of(use.stream));
  if (use.everything) {
    set_bits(everything_streams_, mark.bit);
    raise_to(everything_through_, mark.value);
  }
  const ReadSection section(*this);
  const Snapshot* snapshot = section.snapshot();
  if (snapshot == nullptr) return mark;
  for (uint32_t i = 0; i < use.count; ++i) {
    // A block untracked since record_*() is found no more, or another block is found in its
    // place: the program submitted work on memory it freed.
    const size_t index = snapshot->find(use.bases[i]);
    if (index == snapshot->ranges.size()) continue;
    Record& record = *snapshot->records[index];
    set_bits(record.streams, mark.bit);
    raise_to(record.through, mark.value);
  }
  return mark;
}

void UseTracker::put_back_streams(const QueuedUses& queued) noexcept {
  everything_streams_.fetch_or(queued.bits, std::memory_order_acq_rel);
  raise_to(everything_through_, queued.through);
}

UseTracker::QueuedUses UseTracker::take_streams(std::span<const BlockId> blocks) noexcept {
  QueuedUses queued{.bits = everything_streams_.exchange(0, std::memory_order_acq_rel),
                    .through = everything_through_.load(std::memory_order_relaxed)};
  const std::lock_guard lock(writer_);
  for (const BlockId block : blocks) {
    const auto found = by_block_.find(block);
    if (found == by_block_.end()) {
      queued.bits |= StreamSlots::kUnknownBit;
      continue;
    }
    queued.bits |= found->second->streams.exchange(0, std::memory_order_acq_rel);
    queued.through =
        std::max(queued.through, found->second->through.load(std::memory_order_relaxed));
  }
  return queued;
}

bool UseTracker::marked_since(BlockId block, uint64_t mark) const noexcept {
  if (everything_through_.load(std::memory_order_relaxed) > mark) return true;
  const std::lock_guard lock(writer_);
  const auto found = by_block_.find(block);
  return found == by_block_.end() || found->second->through.load(std::memory_order_relaxed) > mark;
}

Stamp UseTracker::last_everything() const noexcept {
  return {everything_sequence_.load(std::memory_order_acquire),
          everything_stream_.load(std::memory_order_relaxed)};
}

}  // namespace vramspill::core
