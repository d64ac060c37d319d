#include "tiers/move_plan.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <tuple>

#include "tiers/granule_chunks.h"

namespace vramspill::tiers {

std::vector<PieceShape> MovePlan::wanted() const {
  std::vector<PieceShape> shapes;
  for (const Slot& slot : slots) {
    if (slot.from.part != 0) continue;
    shapes.push_back({.kind = slot.from.kind == GranuleKind::kHost ? GranuleKind::kDevice
                                                                    : GranuleKind::kHost,
                      .granules = slot.from.span});
  }
  return shapes;
}

void MovePlan::hand_out() {
  // Four runs of `fresh`, by kind and size, each by home (those without one last).
  const auto order = [](const Granule& piece) {
    return std::tuple(piece.kind, piece.span > 1, piece.home - 1, piece.handle);  // 0 wraps last
  };
  std::ranges::sort(fresh, [&](const Granule& a, const Granule& b) { return order(a) < order(b); });
  // Of each run, [next, end) is still to hand out.
  std::array<std::size_t, 4> next{};
  std::array<std::size_t, 4> end{};
  const auto run_of = [](GranuleKind kind, bool chunk) {
    return static_cast<std::size_t>(kind) * 2 + (chunk ? 1 : 0);
  };
  for (const Granule& piece : fresh) ++end[run_of(piece.kind, piece.span > 1)];
  for (std::size_t run = 1; run < end.size(); ++run) end[run] += end[run - 1];
  for (std::size_t run = 0; run < end.size(); ++run) next[run] = run == 0 ? 0 : end[run - 1];
  std::size_t kept = 0;
  for (std::size_t first = 0; first < slots.size();) {
    const Granule& from = slots[first].from;  // the first of a whole piece (Note [Chunks])
    const std::size_t length = from.span;
    const GranuleKind to =
        from.kind == GranuleKind::kHost ? GranuleKind::kDevice : GranuleKind::kHost;
    const std::size_t chunks = run_of(to, true);
    const std::size_t singles = run_of(to, false);
    std::size_t handed = 0;  // a chunk, or as many singles
    if (length > 1 && next[chunks] < end[chunks] && fresh[next[chunks]].span == length) {
      const Granule& chunk = fresh[next[chunks]++];
      for (; handed < length; ++handed)
        slots[first + handed].to = part_of(chunk, static_cast<uint32_t>(handed));
    } else if (end[singles] - next[singles] >= length) {
      for (; handed < length; ++handed) slots[first + handed].to = fresh[next[singles]++];
    }
    for (std::size_t i = 0; i < handed; ++i) slots[kept++] = slots[first + i];
    first += length;
  }
  slots.resize(kept);
  // What is left of each run was not handed out: the later runs first, so that the earlier ones'
  // positions still hold.
  const auto at = [&](std::size_t index) { return fresh.begin() + static_cast<std::ptrdiff_t>(index); };
  for (std::size_t run = end.size(); run-- > 0;)
    fresh.erase(at(run == 0 ? 0 : end[run - 1]), at(next[run]));
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
