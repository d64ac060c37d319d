// How the granule arena backs a large block with chunks: physical handles of several granules.
//
// Note [Chunks]
// A move maps each handle with a cuMemMap of its own (the shim maps a handle whole, from offset
// 0: cuda.h says both that a nonzero offset must be a multiple of the granularity and that it
// must currently be zero; tier_probe's "offsets" rows ask a GPU), so a block backed granule by
// granule costs a map per 2 MiB each time it moves: 512 per GiB, beside one unmap and one access
// call per run. A block of at least
// ChunkSizes::chunked_block_granules (64 MiB; ArenaOptions::chunks) is backed instead by chunks
// of ChunkSizes::chunk_granules (16 granules, 32 MiB) where whole chunks fit, and by single
// granules for the rest, so that it moves with a map per 32 MiB:
// - The chunks sit at the block's chunk positions, granules [c*j, c*(j+1)) for chunk size c, and
//   the singles at its tail, past the last whole position: a partial eviction takes a block's
//   last granules first (Note [Moving a granule] in tiers/granule_arena.h), and those are the
//   singles. A new block whose device part ends inside a chunk position backs that position with
//   singles, so the block's first `device_granules` are on the device as asked. 64 MiB is where
//   a block holds two chunks: a smaller one would be mostly singles, and the small blocks
//   (PyTorch's 2 MiB and 20 MiB segments) are those that move a few granules at a time.
// - The books keep counting granules: a block's granules, the pools, the budgets and the policies
//   see a chunk as its granules. In the books each granule of a chunk is an entry of its own
//   (Granule::span and Granule::part say which part of which handle), and the granules of one
//   chunk always travel together: a move takes or leaves a chunk whole. An eviction of part of a
//   block rounds up to whole chunks (more room than asked, which the caller charges for:
//   GranuleArena::eviction_granules()), a promotion of part of a block rounds down (never more on
//   the device than the budget let in); moves report the granules that really moved.
// - A moving chunk gets a new chunk of the other kind or, when the driver will not make one,
//   as many singles (the block then has singles at that position from then on); singles get
//   singles. A chunk's home (Note [Granule homes] in tiers/granule_homes.h) is one mapping of
//   the chunk's size in the homes' ranges, its granules' homes following each other, so a chunk
//   is copied home to home with one copy.
// - The pools keep chunks and singles apart (Note [What the pools keep] in
//   tiers/granule_arena.h). A pooled chunk counts as room but cannot back a single granule: when
//   a block or a move needs one size and the pool of its kind holds only the other, pooled pieces
//   of the other size are released and the wanted ones created (the budgets charged the pooled
//   ones as room, so the memory is the same). That is the price of chunks: a new handle needs a
//   new home when it moves, a map and an access call (charged per granule on simcuda), where the
//   pooled one had one already; a job whose moves mix large and small blocks pays it each time
//   the pools' mix swings (about 1 000 granules over three steps of the H200 trace).
// - A chunk the driver will not create falls back to singles: chunks are an economy of calls,
//   never a condition of an allocation or a move.
#pragma once

#include <cstdint>
#include <vector>

#include "tiers/move_plan.h"

namespace vramspill::tiers {

// How the arena chunks blocks (Note [Chunks]): blocks of at least chunked_block_granules are
// backed by chunks of chunk_granules. A chunk of 1 granule, or a threshold above every block,
// backs every block granule by granule.
struct ChunkSizes {
  uint32_t chunk_granules = 16;
  uint64_t chunked_block_granules = 32;
};

// The pieces, in address order, that back a new block of `count` granules whose first
// `device_count` are on the device. Throws std::bad_alloc.
std::vector<PieceShape> block_layout(uint64_t count, uint64_t device_count, ChunkSizes sizes);

// The entry of the books for granule `part` of the handle `piece` (a whole handle: part 0, its
// home at the handle's start).
Granule part_of(const Granule& piece, uint32_t part);
// Appends the entries for each granule of `piece`. Throws std::bad_alloc.
void append_granules(const Granule& piece, std::vector<Granule>& granules);

// The whole handle `granule` is a part of, as the pools keep it.
Granule whole_piece(const Granule& granule);

}  // namespace vramspill::tiers
