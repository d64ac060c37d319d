#include "core/stream_slots.h"

#include <cuda.h>

#include <algorithm>
#include <bit>

namespace vramspill::core {
namespace {

// Note [Stream slots]: the last stream this thread looked up. initial-exec: the preloaded
// library is in the initial TLS block (as in hooks/shim_state.cpp).
struct CachedSlot {
  const StreamSlots* owner = nullptr;
  uint64_t stream = 0;
  uint64_t generation = 0;
  uint64_t bit = 0;
};
__attribute__((tls_model("initial-exec"))) thread_local CachedSlot cached_slot;

// The handles cuda.h spells as casts, so not constants.
uint64_t legacy_stream() noexcept { return reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY); }
uint64_t per_thread_stream() noexcept { return reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD); }

}  // namespace

uint64_t StreamSlots::bit_of(uint64_t stream) noexcept {
  if (stream == legacy_stream()) stream = 0;  // one stream, two names
  if (stream == per_thread_stream()) return kUnknownBit;
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  CachedSlot& cached = cached_slot;
  if (cached.owner == this && cached.stream == stream && cached.generation == generation)
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
  cached = {this, stream, generation, bit};
  return bit;
}

void StreamSlots::retire_slot(std::size_t slot) noexcept {
  slots_[slot].store(kRetired, std::memory_order_release);
  retired_.fetch_or(uint64_t{1} << slot, std::memory_order_acq_rel);
}

void StreamSlots::retire(uint64_t stream) noexcept {
  // Never destroyed: the legacy and per-thread streams live as long as their context.
  if (stream == 0 || stream == legacy_stream() || stream == per_thread_stream()) return;
  const std::lock_guard hold(waiting_);
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    if (slots_[slot].load(std::memory_order_acquire) == stream + 1) retire_slot(slot);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

void StreamSlots::retire_all() noexcept {
  const std::lock_guard hold(waiting_);
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    const uint64_t word = slots_[slot].load(std::memory_order_acquire);
    if (word != 0 && word != kRetired) retire_slot(slot);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

StreamSlots::Waiting StreamSlots::waiting_for(uint64_t bits) {
  Waiting waiting;
  waiting.hold = std::unique_lock(waiting_);
  waiting.retired = retired_.load(std::memory_order_acquire);
  waiting.whole_device = (bits & (kUnknownBit | waiting.retired)) != 0;
  if (waiting.whole_device) return waiting;
  for (; bits != 0; bits &= bits - 1) {
    const uint64_t word =
        slots_[static_cast<std::size_t>(std::countr_zero(bits))].load(std::memory_order_acquire);
    // A free slot was freed by a drained device: nothing of its old stream is queued.
    if (word == 0) continue;
    const uint64_t stream = word - 1;
    if (std::ranges::find(waiting.streams, stream) == waiting.streams.end())
      waiting.streams.push_back(stream);
  }
  return waiting;
}

void StreamSlots::device_drained(const Waiting& waiting) noexcept {
  for (uint64_t bits = waiting.retired; bits != 0; bits &= bits - 1)
    slots_[static_cast<std::size_t>(std::countr_zero(bits))].store(0, std::memory_order_release);
  retired_.fetch_and(~waiting.retired, std::memory_order_acq_rel);
}

}  // namespace vramspill::core
