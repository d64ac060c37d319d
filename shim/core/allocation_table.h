// One shard's live allocations: an open-addressing hash table keyed by (key space, key).
//
// Note [Allocation table layout]
// The ledger touches this table on every allocation and free, so it must not allocate per entry
// (std::unordered_map's node allocation alone costs more than the whole budget of the hot path).
// Entries live inline in one power-of-two array with linear probing; erase shifts the following
// entries back instead of leaving tombstones, so probe lengths never degrade as frameworks churn
// through allocations. Key 0 marks an empty slot: no successful allocation returns a null pointer
// or handle, and the ledger refuses to record key 0. The table grows at 3/4 load and never shrinks:
// a process that once held N allocations tends to hold N again (caching allocators).
// Store forwarding: a free right after its allocation reads the slot back while the stores may
// still be in flight, and a load that spans several narrower stores cannot be forwarded from them
// (a stall of a dozen cycles or more). So a slot is three 64-bit words, each written and read
// whole, and entries leave the table through out-parameters written field by field rather than as
// returned structs, which the compiler copies with 16-byte moves (measured: this was over a third
// of the hot path's time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/route.h"

namespace vramspill::core {

struct Allocation {
  uint64_t key = 0;  // device pointer, VMM handle or CUarray handle (see key_space())
  uint64_t bytes = 0;
  int device = 0;
  Route route = Route::kMemAlloc;

  KeySpace space() const { return key_space(route); }
};

class AllocationTable {
 public:
  // Mixes all bits of the key, so pointers aligned to 2 MiB still spread over shards and slots.
  static uint64_t hash(KeySpace space, uint64_t key) {
    uint64_t x = key ^ (static_cast<uint64_t>(space) << 56);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  }

  // Records an allocation (key != 0; `hash` is hash(key_space(route), key)). An entry with the
  // same space and key is replaced, copied to `replaced` and true returned: the driver handed the
  // key out again, so the old allocation was freed by a route the ledger did not see. Throws
  // std::bad_alloc only while growing, before anything changed.
  // Defined below, in the header: the ledger's hot path inlines both.
  bool insert(uint64_t key, uint64_t bytes, int device, Route route, uint64_t hash,
              Allocation& replaced);

  // Removes the entry for (space, key) and copies it to `erased`; false if there is none.
  bool erase(KeySpace space, uint64_t key, uint64_t hash, Allocation& erased) noexcept;

  // Copies the entry for (space, key) to `found`; false if there is none.
  bool find(KeySpace space, uint64_t key, uint64_t hash, Allocation& found) const noexcept {
    if (size_ == 0) return false;
    for (std::size_t i = static_cast<std::size_t>(hash) & mask_; slots_[i].key != 0;
         i = (i + 1) & mask_) {
      if (slots_[i].key == key && slots_[i].space() == space) {
        slots_[i].copy_to(found);
        return true;
      }
    }
    return false;
  }

  template <typename Fn>
  void for_each(Fn&& fn) const {
    Allocation entry;
    for (const Slot& slot : slots_) {
      if (slot.key == 0) continue;
      slot.copy_to(entry);
      fn(static_cast<const Allocation&>(entry));
    }
  }

  std::size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = 0;
    uint64_t bytes = 0;
    uint64_t tag = 0;  // device | route << 32 | key space << 40

    static uint64_t make_tag(int device, Route route) {
      return static_cast<uint32_t>(device) | uint64_t{static_cast<uint8_t>(route)} << 32 |
             uint64_t{static_cast<uint8_t>(key_space(route))} << 40;
    }
    KeySpace space() const { return static_cast<KeySpace>(tag >> 40); }
    void copy_to(Allocation& out) const {
      out.key = key;
      out.bytes = bytes;
      out.device = static_cast<int>(static_cast<uint32_t>(tag));
      out.route = static_cast<Route>(static_cast<uint8_t>(tag >> 32));
    }
  };

  std::size_t mask() const { return mask_; }
  std::size_t home(const Slot& slot) const {
    return static_cast<std::size_t>(hash(slot.space(), slot.key)) & mask();
  }
  void grow();

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;  // slots_.size() - 1, kept to spare the hot path a division
  std::size_t size_ = 0;
};

inline bool AllocationTable::insert(uint64_t key, uint64_t bytes, int device, Route route,
                                    uint64_t hash, Allocation& replaced) {
  // Grow first, so an allocation failure leaves the table as it was (the replace case may not
  // need the room, but it is rare enough not to special-case). Empty: mask_ + 1 == 1 grows too.
  if ((size_ + 1) * 4 > (mask_ + 1) * 3) grow();
  const uint64_t tag = Slot::make_tag(device, route);
  const KeySpace space = key_space(route);
  for (std::size_t i = static_cast<std::size_t>(hash) & mask_;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == 0) {
      ++size_;
      slot.key = key;
      slot.bytes = bytes;
      slot.tag = tag;
      return false;
    }
    if (slot.key == key && slot.space() == space) {
      slot.copy_to(replaced);
      slot.bytes = bytes;
      slot.tag = tag;
      return true;
    }
  }
}

inline bool AllocationTable::erase(KeySpace space, uint64_t key, uint64_t hash,
                                   Allocation& erased) noexcept {
  if (size_ == 0) return false;
  std::size_t hole = static_cast<std::size_t>(hash) & mask_;
  while (slots_[hole].key != key || slots_[hole].space() != space) {
    if (slots_[hole].key == 0) return false;
    hole = (hole + 1) & mask_;
  }
  slots_[hole].copy_to(erased);
  // Backward-shift deletion: walk the cluster after the hole and move back every entry whose
  // home slot does not lie cyclically in (hole, next], so each stays reachable from its home.
  for (std::size_t next = (hole + 1) & mask_; slots_[next].key != 0; next = (next + 1) & mask_) {
    const std::size_t home_slot = home(slots_[next]);
    const bool stays = hole <= next ? (hole < home_slot && home_slot <= next)
                                    : (hole < home_slot || home_slot <= next);
    if (!stays) {
      slots_[hole] = slots_[next];
      hole = next;
    }
  }
  slots_[hole] = Slot{};
  --size_;
  return true;
}

}  // namespace vramspill::core
