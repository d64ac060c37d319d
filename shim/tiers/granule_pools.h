// The granule arena's pools: physical handles no block maps, kept for the next block or move
// (Note [What the pools keep] in tiers/granule_arena.h), one pool per kind and size (single
// granules, chunks: Note [Chunks] in tiers/granule_chunks.h). Plain books under the arena's lock:
// not thread-safe, no driver call.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "tiers/move_plan.h"

namespace vramspill::tiers {

class GranulePools {
 public:
  // Pooled granules of `kind`, a chunk counting as its granules.
  uint64_t granules(GranuleKind kind) const noexcept;
  // Of those, the granules a copy in flight may still use (Note [Moves copied on the stream] in
  // tiers/granule_arena.h).
  uint64_t unsettled_granules(GranuleKind kind) const noexcept;
  // The granules of `kind` in settled handles holding `span` granules (a chunk's size, or 1).
  uint64_t settled_granules(GranuleKind kind, uint32_t span) const noexcept;

  // Pools a whole handle; `unsettled`: a copy in flight may still use it. Throws std::bad_alloc.
  void put(const Granule& piece, bool unsettled);
  // The last pooled handle of `kind` holding `span` granules, if any.
  std::optional<Granule> take(GranuleKind kind, uint32_t span) noexcept;
  // The last settled one, if any.
  std::optional<Granule> take_settled(GranuleKind kind, uint32_t span) noexcept;
  // Moves settled handles of `kind` holding `span` granules to `out` until `granules` of them
  // went or none is left. Throws std::bad_alloc.
  void take_settled(GranuleKind kind, uint64_t granules, uint32_t span, std::vector<Granule>& out);
  // Moves settled handles of `kind` to `out` beyond `keep` pooled granules: whole chunks while
  // they fit above `keep`, then singles; `at_least`: one chunk more where that is all that leaves
  // `keep` or fewer. Throws std::bad_alloc.
  void trim_to(GranuleKind kind, uint64_t keep, bool at_least, std::vector<Granule>& out);
  // No copy is in flight any more: every pooled handle is settled.
  void settle() noexcept;

  // Every pooled handle, for the arena's checks and its destructor.
  template <typename Visit>
  void for_each(Visit visit) const {
    for (const Pool& pool : pools_) {
      for (const Granule& piece : pool.pieces) visit(piece);
    }
  }

 private:
  struct Pool {
    std::vector<Granule> pieces;
    // How many of the last pieces a copy in flight may still use; the first ones are settled.
    std::size_t unsettled = 0;
    std::size_t settled() const { return pieces.size() - unsettled; }
  };
  static std::size_t index(GranuleKind kind, uint32_t span) {
    return static_cast<std::size_t>(kind) * 2 + (span > 1 ? 1 : 0);
  }
  // Moves the settled pieces of `pool`, from the last, to `out` while `more` says so.
  template <typename More>
  static void move_settled(Pool& pool, std::vector<Granule>& out, More more);

  std::array<Pool, 4> pools_;
};

}  // namespace vramspill::tiers
