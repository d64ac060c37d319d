#include "tiers/move_plan.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace vramspill::tiers {

uint64_t MovePlan::to_device() const {
  return static_cast<uint64_t>(std::ranges::count_if(
      slots, [](const Slot& slot) { return slot.from.kind == GranuleKind::kHost; }));
}

void MovePlan::hand_out() {
  const auto first_host = static_cast<std::size_t>(
      std::ranges::find_if(fresh,
                           [](const Granule& granule) { return granule.kind == GranuleKind::kHost; }) -
      fresh.begin());
  std::size_t next_device = 0;
  std::size_t next_host = first_host;
  std::erase_if(slots, [&](Slot& slot) {
    if (slot.from.kind == GranuleKind::kHost) {
      if (next_device == first_host) return true;
      slot.to = fresh[next_device++];
    } else {
      if (next_host == fresh.size()) return true;
      slot.to = fresh[next_host++];
    }
    return false;
  });
  // What is left of each kind was not handed out: the later range first, so that the earlier
  // one's positions still hold.
  const auto at = [&](std::size_t index) { return fresh.begin() + static_cast<std::ptrdiff_t>(index); };
  fresh.erase(at(first_host), at(next_host));
  fresh.erase(at(0), at(next_device));
}

std::string MovePlan::describe() const {
  std::string text = std::to_string(slots.size()) + " granules of " +
                     std::to_string(moving.size()) + " blocks:";
  // One item per run of consecutive granules of a block moving the same way.
  for (std::size_t first = 0; first < slots.size();) {
    std::size_t past = first + 1;
    while (past < slots.size() && slots[past].block == slots[first].block &&
           slots[past].index == slots[past - 1].index + 1 &&
           slots[past].from.kind == slots[first].from.kind && slots[past].dead == slots[first].dead)
      ++past;
    char item[96];
    std::snprintf(item, sizeof item, " 0x%" PRIx64 "[%zu..%zu] to the %s%s",
                  static_cast<uint64_t>(slots[first].block), slots[first].index,
                  slots[past - 1].index,
                  slots[first].from.kind == GranuleKind::kHost ? "device" : "host",
                  slots[first].dead ? " (dead)" : "");
    text += item;
    first = past;
  }
  return text;
}

}  // namespace vramspill::tiers
