#include "tiers/granule_pools.h"

#include <algorithm>

namespace vramspill::tiers {

uint64_t GranulePools::granules(GranuleKind kind) const noexcept {
  uint64_t count = 0;
  for (const uint32_t span : {1u, 2u}) {
    for (const Granule& piece : pools_[index(kind, span)].pieces) count += piece.span;
  }
  return count;
}

uint64_t GranulePools::unsettled_granules(GranuleKind kind) const noexcept {
  uint64_t count = 0;
  for (const uint32_t span : {1u, 2u}) {
    const Pool& pool = pools_[index(kind, span)];
    for (std::size_t i = pool.settled(); i < pool.pieces.size(); ++i) count += pool.pieces[i].span;
  }
  return count;
}

uint64_t GranulePools::settled_granules(GranuleKind kind, uint32_t span) const noexcept {
  const Pool& pool = pools_[index(kind, span)];
  uint64_t count = 0;
  for (std::size_t i = 0; i < pool.settled(); ++i) count += pool.pieces[i].span;
  return count;
}

void GranulePools::put(const Granule& piece, bool unsettled) {
  Pool& pool = pools_[index(piece.kind, piece.span)];
  pool.pieces.push_back(piece);
  if (unsettled) ++pool.unsettled;
}

std::optional<Granule> GranulePools::take(GranuleKind kind, uint32_t span) noexcept {
  Pool& pool = pools_[index(kind, span)];
  if (pool.pieces.empty()) return std::nullopt;
  // The last piece: an unsettled one while there are any (the moves that take pieces this way
  // queue their copies after those in flight).
  const Granule piece = pool.pieces.back();
  pool.pieces.pop_back();
  if (pool.unsettled > 0) --pool.unsettled;
  return piece;
}

std::optional<Granule> GranulePools::take_settled(GranuleKind kind, uint32_t span) noexcept {
  Pool& pool = pools_[index(kind, span)];
  if (pool.settled() == 0) return std::nullopt;
  const auto at = pool.pieces.begin() + static_cast<std::ptrdiff_t>(pool.settled() - 1);
  const Granule piece = *at;
  pool.pieces.erase(at);
  return piece;
}

template <typename More>
void GranulePools::move_settled(Pool& pool, std::vector<Granule>& out, More more) {
  // The settled pieces are the first ones: a copy in flight may use the last `unsettled`.
  while (pool.settled() > 0 && more(pool.pieces[pool.settled() - 1])) {
    const auto at = pool.pieces.begin() + static_cast<std::ptrdiff_t>(pool.settled() - 1);
    out.push_back(*at);
    pool.pieces.erase(at);
  }
}

void GranulePools::take_settled(GranuleKind kind, uint64_t granules, uint32_t span,
                                std::vector<Granule>& out) {
  uint64_t taken = 0;
  move_settled(pools_[index(kind, span)], out, [&](const Granule& piece) {
    if (taken >= granules) return false;
    taken += piece.span;
    return true;
  });
}

void GranulePools::trim_to(GranuleKind kind, uint64_t keep, bool at_least,
                           std::vector<Granule>& out) {
  uint64_t pooled = granules(kind);
  const auto above_keep = [&](const Granule& piece) {
    if (pooled < keep || pooled - keep < piece.span) return false;  // keep may be UINT64_MAX
    pooled -= piece.span;
    return true;
  };
  move_settled(pools_[index(kind, 2)], out, above_keep);
  move_settled(pools_[index(kind, 1)], out, above_keep);
  if (at_least && pooled > keep) {
    move_settled(pools_[index(kind, 2)], out, [&](const Granule& piece) {
      if (pooled <= keep) return false;
      pooled -= piece.span;
      return true;
    });
  }
}

void GranulePools::settle() noexcept {
  for (Pool& pool : pools_) pool.unsettled = 0;
}

}  // namespace vramspill::tiers
