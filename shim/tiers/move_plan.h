// What one batch of the granule arena's moves will do, as a value (Note [A move plan]).
//
// Note [A move plan]
// A batch of moves is planned from the arena's books under its lock (GranuleArena::plan()): one
// slot for each granule of a live block that changes backing, with the granule that backs it
// now; then each slot is handed a new granule (hand_out(), from those the arena took for the
// batch) and carried out by the mover (tiers/granule_mover.h) with no lock held. As a value it
// can be printed (describe(), for tests' failure messages and a debugger) and tested on its own. The mover drops the slots it cannot carry out from the plan, and `fresh` collects what the
// pools take back at the end: the new granules no slot took, and each slot's old granule (or,
// where it did not move, its new one).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tiers/granule_ops.h"

namespace vramspill::tiers {

// A physical granule as the arena's books and the mover know it: a handle of its own, or one
// granule of a chunk (Note [Chunks] in tiers/granule_chunks.h).
struct Granule {
  GranuleHandle handle = 0;
  GranuleKind kind = GranuleKind::kDevice;
  CUdeviceptr home = 0;  // none yet (Note [Granule homes] in tiers/granule_homes.h)
  uint32_t span = 1;     // the granules `handle` holds
  uint32_t part = 0;     // which of them this is: home and address are part granules in
};

// One physical handle a new block or a move asks for: its kind and size in granules.
struct PieceShape {
  GranuleKind kind = GranuleKind::kDevice;
  uint32_t granules = 1;
};

// A granule of a live block that a move changes: the `index`th of the block at `block`.
struct Slot {
  CUdeviceptr block = 0;
  std::size_t index = 0;
  Granule from;
  Granule to;
  bool dead = false;  // remapped without a copy (Note [Moves of dead contents])
  CUdeviceptr address() const { return block + index * kGranuleBytes; }
};

struct MovePlan {
  std::vector<Slot> slots;      // sorted by block, then index
  std::vector<Granule> fresh;   // see Note [A move plan]; room reserved by the arena
  std::vector<uint64_t> moving;  // the bases of the blocks the slots name, each once

  // The handles the slots need: one of the other kind and the same size for each handle they
  // move from (Note [Chunks] in tiers/granule_chunks.h). Throws std::bad_alloc.
  std::vector<PieceShape> wanted() const;
  // Step 2 of Note [Moving a granule] (tiers/granule_arena.h): a new granule for each slot from
  // `fresh` (whole handles, as the pools keep them), each size by home, so that the homes of a
  // run follow each other where they can. The slots of a chunk (whole, in order) take a chunk or,
  // short of one, as many singles (Note [Chunks] in tiers/granule_chunks.h); the slots that get
  // none are dropped, and `fresh` keeps what was not handed out. Allocates nothing.
  void hand_out();
  // One line: the slots, block by block, with their runs and directions.
  std::string describe() const;
};

}  // namespace vramspill::tiers
