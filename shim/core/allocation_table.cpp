// The table's cold part; insert and erase are inline in the header.
#include "core/allocation_table.h"

namespace vramspill::core {

namespace {
constexpr std::size_t kInitialSlots = 64;
}  // namespace

void AllocationTable::grow() {
  std::vector<Slot> old(slots_.empty() ? kInitialSlots : slots_.size() * 2);
  old.swap(slots_);
  mask_ = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.key == 0) continue;
    std::size_t i = home(slot);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
}

}  // namespace vramspill::core
