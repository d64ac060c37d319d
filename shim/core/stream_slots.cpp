#include "core/stream_slots.h"

#include <cuda.h>

#include <algorithm>
#include <bit>

namespace vramspill::core {
namespace {

// Note [Stream slots]: the last stream this thread looked up. initial-exec: the preloaded
// library is in the initial TLS block (as in hooks/shim_state.cpp).
struct CachedSlot {
  uint64_t owner = 0;  // a StreamSlots' id: an address can be reused by another object
  uint64_t stream = 0;
  uint64_t generation = 0;
  uint64_t bit = 0;
};
__attribute__((tls_model("initial-exec"))) thread_local CachedSlot cached_slot;

// The handles cuda.h spells as casts, so not constants.
uint64_t legacy_stream() noexcept { return reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY); }
uint64_t per_thread_stream() noexcept { return reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD); }

constinit std::atomic<uint64_t> next_id{0};

}  // namespace

StreamSlots::StreamSlots() noexcept : id_(next_id.fetch_add(1, std::memory_order_relaxed) + 1) {}

uint64_t StreamSlots::bit_of(uint64_t stream) noexcept {
  if (stream == legacy_stream()) stream = 0;  // one stream, two names
  if (stream == per_thread_stream()) return kUnknownBit;
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  CachedSlot& cached = cached_slot;
  if (cached.owner == id_ && cached.stream == stream && cached.generation == generation)
    return cached.bit;
  const uint64_t word = stream + 1;
  uint64_t bit = kUnknownBit;
  for (std::size_t slot = 0; slot < kSlots && bit == kUnknownBit; ++slot) {
    if (slots_[slot].load(std::memory_order_acquire) == word) bit = uint64_t{1} << slot;
  }
  for (std::size_t slot = 0; slot < kSlots && bit == kUnknownBit; ++slot) {
    uint64_t free = 0;
    if (slots_[slot].compare_exchange_strong(free, word, std::memory_order_acq_rel))
      bit = uint64_t{1} << slot;
  }
  cached = {id_, stream, generation, bit};
  return bit;
}

std::optional<std::size_t> StreamSlots::slot_of(uint64_t bit) noexcept {
  if (bit == 0 || bit == kUnknownBit) return std::nullopt;
  return static_cast<std::size_t>(std::countr_zero(bit));
}

void StreamSlots::retire_slot(std::size_t slot, void (*destroy)(uint64_t event)) noexcept {
  slots_[slot].store(kRetired, std::memory_order_release);
  Ring& ring = rings_[slot];
  for (Ring::Entry& entry : ring.entries) {
    const uint64_t event = entry.event.exchange(0, std::memory_order_acq_rel);
    entry.mark.store(0, std::memory_order_relaxed);
    if (event != 0 && destroy != nullptr) destroy(event);
  }
  ring.since_event.store(0, std::memory_order_relaxed);
  ring.context.store(0, std::memory_order_relaxed);
  ring.mixed.store(false, std::memory_order_relaxed);
  retired_.fetch_or(uint64_t{1} << slot, std::memory_order_acq_rel);
}

void StreamSlots::retire(uint64_t stream, void (*destroy)(uint64_t event)) noexcept {
  // Never destroyed: the legacy and per-thread streams live as long as their context.
  if (stream == 0 || stream == legacy_stream() || stream == per_thread_stream()) return;
  const std::lock_guard hold(waiting_);
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    if (slots_[slot].load(std::memory_order_acquire) == stream + 1) retire_slot(slot, destroy);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

void StreamSlots::retire_all() noexcept {
  const std::lock_guard hold(waiting_);
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    const uint64_t word = slots_[slot].load(std::memory_order_acquire);
    if (word != 0 && word != kRetired) retire_slot(slot, nullptr);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

// Note [Last uses by event]: counted in on the slot before the mark is taken, so that a
// submission that checks its slot after its call sees every lower mark of the slot either still
// counted in or done with its call.
StreamSlots::Mark StreamSlots::begin_call(uint64_t bit) noexcept {
  if (const auto slot = slot_of(bit)) {
    rings_[*slot].in_call.fetch_add(1, std::memory_order_seq_cst);
    rings_[*slot].since_event.fetch_add(1, std::memory_order_relaxed);
  }
  return {bit, marks_.fetch_add(1, std::memory_order_seq_cst) + 1};
}

bool StreamSlots::names_legacy_stream(uint64_t stream) noexcept {
  return stream == 0 || stream == legacy_stream();
}

void StreamSlots::submitted_in(const Mark& mark, uint64_t stream, uint64_t context) noexcept {
  const auto slot = slot_of(mark.bit);
  if (!slot || context == 0 || !names_legacy_stream(stream)) return;
  Ring& ring = rings_[*slot];
  uint64_t first_context = 0;
  if (!ring.context.compare_exchange_strong(first_context, context, std::memory_order_relaxed) &&
      first_context != context)
    ring.mixed.store(true, std::memory_order_relaxed);
}

std::optional<StreamSlots::Recording> StreamSlots::end_call(const Mark& mark) noexcept {
  const auto slot = slot_of(mark.bit);
  if (!slot) return std::nullopt;
  Ring& ring = rings_[*slot];
  if (ring.in_call.load(std::memory_order_seq_cst) == 1 &&
      ring.since_event.load(std::memory_order_relaxed) >= kRecordEvery &&
      !ring.mixed.load(std::memory_order_relaxed)) {
    const std::size_t entry = ring.next.load(std::memory_order_relaxed);
    return Recording{.slot = *slot,
                     .entry = entry,
                     .event = ring.entries[entry].event.load(std::memory_order_relaxed),
                     .mark = mark.value};
  }
  ring.in_call.fetch_sub(1, std::memory_order_seq_cst);
  return std::nullopt;
}

bool StreamSlots::recorded(const Recording& recording, uint64_t event, uint64_t context) noexcept {
  Ring& ring = rings_[recording.slot];
  Ring::Entry& entry = ring.entries[recording.entry];
  uint64_t first_context = 0;
  const bool kept = event != 0 && (ring.context.compare_exchange_strong(
                                       first_context, context, std::memory_order_relaxed) ||
                                   first_context == context);
  if (event != 0 && !kept) ring.mixed.store(true, std::memory_order_relaxed);
  entry.event.store(kept ? event : 0, std::memory_order_relaxed);
  entry.mark.store(kept ? recording.mark : 0, std::memory_order_relaxed);
  if (kept) {
    ring.since_event.store(0, std::memory_order_relaxed);
    ring.next.store((recording.entry + 1) % kRing, std::memory_order_relaxed);
  }
  ring.in_call.fetch_sub(1, std::memory_order_seq_cst);
  return kept;
}

uint64_t StreamSlots::event_after(std::size_t slot, uint64_t through) const noexcept {
  uint64_t event = 0;
  uint64_t earliest = ~uint64_t{0};
  for (const Ring::Entry& entry : rings_[slot].entries) {
    const uint64_t mark = entry.mark.load(std::memory_order_relaxed);
    if (mark != 0 && mark >= through && mark < earliest) {
      earliest = mark;
      event = entry.event.load(std::memory_order_relaxed);
    }
  }
  return event;
}

StreamSlots::Waiting StreamSlots::waiting_for(uint64_t bits, uint64_t through) {
  Waiting waiting;
  waiting.hold = std::unique_lock(waiting_);
  waiting.retired = retired_.load(std::memory_order_acquire);
  uint64_t mixed = 0;  // slots whose events came from two contexts
  for (uint64_t rest = bits & ~kUnknownBit; rest != 0; rest &= rest - 1) {
    const auto slot = static_cast<std::size_t>(std::countr_zero(rest));
    if (rings_[slot].mixed.load(std::memory_order_relaxed)) mixed |= uint64_t{1} << slot;
  }
  waiting.whole_device = (bits & (kUnknownBit | waiting.retired | mixed)) != 0;
  if (waiting.whole_device) return waiting;
  for (; bits != 0; bits &= bits - 1) {
    const auto slot = static_cast<std::size_t>(std::countr_zero(bits));
    const uint64_t word = slots_[slot].load(std::memory_order_acquire);
    // A free slot was freed by a drained device: nothing of its old stream is queued.
    if (word == 0) continue;
    // A stream with two slots has an end for each: each ring follows its own slot's marks.
    waiting.ends.push_back({.stream = word - 1, .event = event_after(slot, through)});
  }
  return waiting;
}

void StreamSlots::device_drained(const Waiting& waiting) noexcept {
  for (uint64_t bits = waiting.retired; bits != 0; bits &= bits - 1)
    slots_[static_cast<std::size_t>(std::countr_zero(bits))].store(0, std::memory_order_release);
  retired_.fetch_and(~waiting.retired, std::memory_order_acq_rel);
}

}  // namespace vramspill::core
