#include "tiers/granule_arena.h"

#include <algorithm>
#include <iterator>
#include <new>
#include <set>
#include <string>
#include <utility>

namespace vramspill::tiers {

GranuleArena::~GranuleArena() {
  // Note [Moves copied on the stream]: nothing a copy still reads or writes is given back.
  if (mover_.copies_pending() == 0 || ops_.wait_for_copies() == CUDA_SUCCESS) {
    retire_copies(true, true);
  } else {
    return;  // the driver keeps everything
  }
  for (auto& [base, block] : blocks_) {
    // A staged copy still reading its block's address leaves everything to the driver.
    if (!block.staged.empty() && !unstage(base).copies_over) return;
  }
  for (auto& [base, block] : blocks_) {
    if (unmap_first(base, block.granules, block.granules.size()))
      unreserve(base, granules_for(block.bytes));
    for (const Granule& granule : block.granules) {
      if (granule.part == 0) release(granule);
    }
  }
  pools_.for_each([&](const Granule& piece) { release(piece); });
}

CUresult GranuleArena::allocate(uint64_t bytes, uint64_t device_granules,
                                CUdeviceptr* base) noexcept {
  const uint64_t count = granules_for(bytes);
  if (base == nullptr || bytes == 0 || device_granules > count) return CUDA_ERROR_INVALID_VALUE;
  std::vector<PieceShape> layout;
  std::vector<Granule> pieces;
  std::vector<Granule> granules;
  std::vector<Mapping> mappings;
  try {
    layout = block_layout(count, device_granules, chunk_sizes());  // Note [Chunks]
    pieces.reserve(count);
    granules.reserve(count);
    mappings.reserve(count);
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Note [Moves copied on the stream]: the program writes a new block as it likes. (No move runs
  // between the settling and the taking: the placement serialises a device's allocations and
  // moves.) Beside a capture the block takes only settled granules instead (Note [Copies in
  // flight beside a capture]).
  if (const CUresult settled = settle_copies();
      settled != CUDA_SUCCESS && settled != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    return settled;
  CUresult result = CUDA_SUCCESS;
  try {
    result = take_pieces(layout, pieces, false);
  } catch (const std::bad_alloc&) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUdeviceptr range = 0;
  if (result == CUDA_SUCCESS) result = ops_.reserve(count * kGranuleBytes, &range);
  if (result != CUDA_SUCCESS) {
    pool(pieces);
    return result;
  }
  for (const Granule& piece : pieces) {  // within the room reserved: count granules in all
    append_granules(piece, granules);
    mappings.push_back({.handle = piece.handle, .granules = piece.span});
  }
  // All or nothing: a failed map leaves nothing mapped.
  result = ops_.map(range, mappings);
  const std::size_t mapped = result == CUDA_SUCCESS ? count : 0;
  if (result == CUDA_SUCCESS) {
    try {
      const std::lock_guard lock(mutex_);
      blocks_.emplace(range,
                      Block{.bytes = bytes, .granules = granules, .staged = {}, .staged_since = 0});
      *base = range;
      return CUDA_SUCCESS;
    } catch (const std::bad_alloc&) {  // the books cannot hold it: undone like a failed map
      result = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (unmap_first(range, granules, mapped)) {
    unreserve(range, count);
  } else {
    const std::lock_guard lock(mutex_);
    ++leaked_ranges_;  // granules the driver would not unmap keep it
  }
  pool(granules);
  return result;
}

ChunkSizes GranuleArena::chunk_sizes() const noexcept {
  return {.chunk_granules = std::min<uint32_t>(options_.chunks.chunk_granules,
                                               static_cast<uint32_t>(GranuleMover::kRunGranules)),
          .chunked_block_granules = options_.chunks.chunked_block_granules};
}

CUresult GranuleArena::take_pieces(std::span<const PieceShape> wanted, std::vector<Granule>& taken,
                                   bool moving) {
  // All the room first: once a handle is out of the pools or made, nothing here may throw, or
  // the handle would be lost. The handles taken hold at most the granules wanted (a chunk the
  // driver refuses comes as as many singles), and so do those of the other size released for
  // them (as many as the granules missing, at most).
  uint64_t most = 0;
  for (const PieceShape& shape : wanted) most += shape.granules;
  taken.reserve(taken.size() + most);
  std::vector<Granule> other_size;
  other_size.reserve(most);
  std::vector<std::optional<Granule>> pooled(wanted.size());
  std::array<uint64_t, 4> missing{};  // granules to make, by kind, singles then chunks
  const auto missing_of = [&](GranuleKind kind, bool chunk) -> uint64_t& {
    return missing.at(static_cast<std::size_t>(kind) * 2 + (chunk ? 1 : 0));
  };
  {
    const std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      const PieceShape& shape = wanted[i];
      if (moving) taken_since_trim_.at(static_cast<std::size_t>(shape.kind)) += shape.granules;
      // A block's granules, while copies are still in flight (their wait refused beside a
      // capture), are settled ones: the program may write them at once.
      pooled[i] = moving || mover_.copies_pending() == 0
                      ? pools_.take(shape.kind, shape.granules)
                      : pools_.take_settled(shape.kind, shape.granules);
      if (!pooled[i]) missing_of(shape.kind, shape.granules > 1) += shape.granules;
    }
  }
  // Note [Chunks]: the budgets charged what the pools hold as room, so pooled handles of the
  // other size go back before those wanted are made. Not while a copy in flight may use them
  // (Note [Moves copied on the stream]): where the settled ones are too few, the copies are
  // waited for first.
  const uint32_t chunk = chunk_sizes().chunk_granules;
  for (const GranuleKind kind : {GranuleKind::kDevice, GranuleKind::kHost}) {
    if (missing_of(kind, false) + missing_of(kind, true) == 0) continue;
    bool wait = false;
    {
      const std::lock_guard lock(mutex_);
      wait = pools_.unsettled_granules(kind) != 0 &&
             (pools_.settled_granules(kind, 1) < missing_of(kind, true) ||
              pools_.settled_granules(kind, chunk) < missing_of(kind, false));
    }
    // A move holds the move lock in a closed window (an allocation has settled the copies).
    if (wait && ops_.wait_for_copies() == CUDA_SUCCESS) retire_copies(true, moving);
    const std::lock_guard lock(mutex_);
    pools_.take_settled(kind, missing_of(kind, true), 1, other_size);
    pools_.take_settled(kind, missing_of(kind, false), chunk, other_size);
  }
  for (const Granule& piece : other_size) release(piece);
  CUresult result = CUDA_SUCCESS;
  const auto make = [&](GranuleKind kind, uint32_t granules) {
    Granule made{.handle = 0, .kind = kind, .home = 0, .span = granules};
    result = ops_.create(kind, granules, &made.handle);
    if (result != CUDA_SUCCESS) return false;
    taken.push_back(made);
    const std::lock_guard lock(mutex_);
    created_ += granules;
    return true;
  };
  // Device handles first (a block's device granules come first: block_layout()), each in the
  // order wanted.
  for (const GranuleKind kind : {GranuleKind::kDevice, GranuleKind::kHost}) {
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      if (wanted[i].kind != kind) continue;
      if (pooled[i]) {
        taken.push_back(*pooled[i]);
      } else if (result == CUDA_SUCCESS && !make(kind, wanted[i].granules) &&
                 wanted[i].granules > 1) {
        // Note [Chunks]: a chunk the driver will not make comes as singles, in its place.
        for (uint32_t single = 0; single < wanted[i].granules && make(kind, 1); ++single) {
        }
      }
    }
  }
  return result;
}

bool GranuleArena::unmap_first(CUdeviceptr base, std::vector<Granule>& granules,
                               std::size_t count) {
  if (count == 0 || ops_.unmap(base, count) == CUDA_SUCCESS) return true;
  // Handle by handle: the granules of one the driver keeps stay mapped.
  std::vector<bool> kept(count, false);
  bool all_unmapped = true;
  for (std::size_t i = 0; i < count; i += granules[i].span) {
    const bool refused = ops_.unmap(base + i * kGranuleBytes, granules[i].span) != CUDA_SUCCESS;
    for (std::size_t part = 0; part < granules[i].span; ++part) kept[i + part] = refused;
    all_unmapped = all_unmapped && !refused;
  }
  if (all_unmapped) return true;
  std::size_t index = 0;
  uint64_t leaked = 0;
  std::erase_if(granules, [&](const Granule&) {
    const bool lost = index < count && kept[index];
    ++index;
    leaked += lost ? 1 : 0;
    return lost;
  });
  const std::lock_guard lock(mutex_);
  leaked_granules_ += leaked;
  return false;
}

void GranuleArena::unreserve(CUdeviceptr base, uint64_t granules) {
  if (ops_.unreserve(base, granules * kGranuleBytes) == CUDA_SUCCESS) return;
  const std::lock_guard lock(mutex_);
  ++leaked_ranges_;
}

void GranuleArena::pool(const std::vector<Granule>& granules) noexcept {
  for (const Granule& granule : granules) pool_one(granule);
}

void GranuleArena::pool_one(const Granule& granule) noexcept {
  if (granule.part != 0) return;  // pooled with its chunk's first part
  try {
    const std::lock_guard lock(mutex_);
    // Note [Moves copied on the stream]: a copy in flight may still use it, as far as is known.
    pools_.put(granule, mover_.copies_pending() != 0);
    return;
  } catch (const std::bad_alloc&) {  // the pool cannot grow: the driver has it back instead
  }
  // Not under a copy in flight that may still use it (Note [Moves copied on the stream]): the
  // copies are waited for first, and should that fail it stays the driver's, unused.
  if (mover_.copies_pending() != 0 && ops_.wait_for_copies() != CUDA_SUCCESS) {
    const std::lock_guard lock(mutex_);
    leaked_granules_ += granule.span;
    return;
  }
  release(granule);
}

void GranuleArena::release(const Granule& piece) noexcept {
  // A handle still mapped at its home would outlive its release: it stays the driver's.
  const bool released = mover_.vacate(piece) && ops_.release(piece.handle) == CUDA_SUCCESS;
  const std::lock_guard lock(mutex_);
  (released ? released_ : leaked_granules_) += piece.span;
}

std::optional<ArenaBlock> GranuleArena::free(CUdeviceptr base) noexcept {
  const std::lock_guard move_lock(move_mutex_);  // Note [Moving a granule]
  Block block;
  bool staged = false;
  {
    const std::lock_guard lock(mutex_);
    const auto found = blocks_.find(base);
    if (found == blocks_.end()) return std::nullopt;
    staged = !found->second.staged.empty();
  }
  const bool copied_into = mover_.copying_into(base);
  // Note [Staged promotions]: the staged copy reads the block's address.
  const bool staged_copy_over = !staged || unstage(base).copies_over;
  // Note [Moves copied on the stream]: a copy may still write the block's granules.
  const CUresult waited =
      staged_copy_over && copied_into ? ops_.wait_for_copies() : CUDA_SUCCESS;
  const bool copy_over = staged_copy_over && waited == CUDA_SUCCESS;
  if (copied_into && copy_over) retire_copies(true, false);
  {
    const std::lock_guard lock(mutex_);
    const auto found = blocks_.find(base);
    block = std::move(found->second);
    blocks_.erase(found);
    // Note [What the pools keep]: the moves to come have this block's granules less to move.
    for (std::size_t kind = 0; kind < demand_.size(); ++kind) {
      const uint64_t freed = block.granules.size();
      demand_[kind] -= std::min(demand_[kind], freed);
      taken_since_trim_[kind] -= std::min(taken_since_trim_[kind], freed);
    }
  }
  const ArenaBlock freed = view(base, block);
  if (!copy_over) {
    const std::lock_guard lock(mutex_);
    if (waited == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
      try {  // Note [Copies in flight beside a capture]
        freed_under_copies_.emplace(base, std::move(block));
        return freed;
      } catch (const std::bad_alloc&) {  // no room in the books: left to the driver, as below
      }
    }
    // Mapped under a copy that may never end: left to the driver.
    ++leaked_ranges_;
    leaked_granules_ += freed.granules;
    return freed;
  }
  if (unmap_first(base, block.granules, block.granules.size())) {
    unreserve(base, freed.granules);
  } else {
    const std::lock_guard lock(mutex_);
    ++leaked_ranges_;
  }
  pool(block.granules);
  return freed;
}

std::optional<ArenaBlock> GranuleArena::block_containing(CUdeviceptr address) const noexcept {
  const std::lock_guard lock(mutex_);
  auto after = blocks_.upper_bound(address);
  if (after == blocks_.begin()) return std::nullopt;
  const auto& [base, block] = *std::prev(after);
  if (address - base >= block.granules.size() * kGranuleBytes) return std::nullopt;
  return view(base, block);
}

void GranuleArena::trim() noexcept {
  std::array<uint64_t, 2> keep{options_.keep_device_granules, options_.keep_host_granules};
  {
    const std::lock_guard lock(mutex_);
    for (std::size_t kind = 0; kind < keep.size(); ++kind) {  // Note [What the pools keep]
      demand_[kind] = std::max(taken_since_trim_[kind], demand_[kind] - (demand_[kind] + 7) / 8);
      taken_since_trim_[kind] = 0;
      keep[kind] = std::max(keep[kind], demand_[kind]);
    }
  }
  trim_to(keep[0], keep[1], false, false);
}

void GranuleArena::give_back_device_granules(uint64_t granules) noexcept {
  uint64_t pooled = 0;
  {
    const std::lock_guard lock(mutex_);
    pooled = pools_.granules(GranuleKind::kDevice);
  }
  trim_to(pooled > granules ? pooled - granules : 0, UINT64_MAX, true, true);
}

void GranuleArena::trim_to(uint64_t keep_device, uint64_t keep_host, bool settle,
                           bool at_least) noexcept {
  const std::array<uint64_t, 2> keep{keep_device, keep_host};
  // Note [Moves copied on the stream]: no memory a copy may still use goes back to the driver.
  if (settle) {
    // Only when what is to go reaches into the granules a copy may use.
    bool short_of_settled = false;
    {
      const std::lock_guard lock(mutex_);
      for (const GranuleKind kind : {GranuleKind::kDevice, GranuleKind::kHost}) {
        const uint64_t kept = keep.at(static_cast<std::size_t>(kind));
        short_of_settled = short_of_settled || (pools_.granules(kind) > kept &&
                                                pools_.unsettled_granules(kind) > kept);
      }
    }
    if (short_of_settled && settle_copies() != CUDA_SUCCESS) return;
  }
  std::vector<Granule> surplus;
  {
    const std::lock_guard lock(mutex_);
    for (const GranuleKind kind : {GranuleKind::kDevice, GranuleKind::kHost}) {
      try {
        pools_.trim_to(kind, keep.at(static_cast<std::size_t>(kind)), at_least, surplus);
      } catch (const std::bad_alloc&) {  // trimmed next time
      }
    }
  }
  for (const Granule& piece : surplus) release(piece);
}

ArenaBlock GranuleArena::view(CUdeviceptr base, const Block& block) {
  ArenaBlock view{.base = base,
                  .bytes = block.bytes,
                  .granules = block.granules.size(),
                  .staged_granules = block.staged.size()};
  for (const Granule& granule : block.granules)
    view.device_granules += granule.kind == GranuleKind::kDevice ? 1 : 0;
  return view;
}

ArenaStats GranuleArena::stats() const noexcept {
  const std::lock_guard lock(mutex_);
  ArenaStats stats{.blocks = blocks_.size(),
                   .pooled_device_granules = pools_.granules(GranuleKind::kDevice),
                   .pooled_host_granules = pools_.granules(GranuleKind::kHost),
                   .homes = mover_.homes(),
                   .created_granules = created_,
                   .released_granules = released_,
                   .leaked_granules = leaked_granules_,
                   .leaked_ranges = leaked_ranges_,
                   .unbacked_granules = mover_.unbacked_granules(),
                   .move_vmm_calls = mover_.move_vmm_calls(),
                   .vmm_calls = ops_.vmm_calls()};
  for (const auto* held : {&blocks_, &freed_under_copies_}) {
    for (const auto& [base, block] : *held) {
      const ArenaBlock counted = view(base, block);
      stats.device_granules += counted.device_granules;
      stats.host_granules += counted.host_granules();
      stats.staged_host_granules += counted.staged_granules;
    }
  }
  return stats;
}

bool GranuleArena::check_invariants(std::string* problem) const {
  const auto fail = [&](std::string what) {
    if (problem != nullptr) *problem = std::move(what);
    return false;
  };
  const std::lock_guard lock(mutex_);
  std::set<std::pair<GranuleHandle, uint32_t>> seen;  // handle and part
  std::set<CUdeviceptr> homes;
  const auto home_taken = [&](const Granule& granule) {
    return granule.home != 0 && !homes.insert(granule.home).second;
  };
  uint64_t held = 0;
  uint64_t staged_blocks = 0;
  // The live blocks, then those freed under copies in flight (Note [Copies in flight beside a
  // capture]), which hold their granules as live blocks do.
  for (const auto* blocks : {&blocks_, &freed_under_copies_}) {
    CUdeviceptr previous_end = 0;
    for (const auto& [base, block] : *blocks) {
      if (!block.staged.empty()) ++staged_blocks;
      if (base % kGranuleBytes != 0) return fail("a block's range is not granule-aligned");
      if (base < previous_end) return fail("two blocks' ranges overlap");
      if (block.granules.size() != granules_for(block.bytes))
        return fail("a block has " + std::to_string(block.granules.size()) + " granules for " +
                    std::to_string(block.bytes) + " bytes");
      previous_end = base + block.granules.size() * kGranuleBytes;
      for (std::size_t i = 0; i < block.granules.size(); ++i) {
        const Granule& granule = block.granules[i];
        if (!seen.insert({granule.handle, granule.part}).second)
          return fail("a granule backs two places");
        if (home_taken(granule)) return fail("two granules share a home");
        // Note [Chunks]: a chunk's granules follow each other, whole, at the block's address.
        const bool follows_its_part = i > 0 && block.granules[i - 1].handle == granule.handle &&
                                      block.granules[i - 1].part + 1 == granule.part;
        if (granule.part >= granule.span || (granule.part != 0 && !follows_its_part) ||
            (granule.part + 1 < granule.span &&
             (i + 1 == block.granules.size() || block.granules[i + 1].handle != granule.handle)))
          return fail("a block maps part of a chunk");
        ++held;
      }
      for (const Slot& slot : block.staged) {
        if (block.granules.at(slot.index).handle != slot.to.handle)
          return fail("a staged granule is not in its block's books");
        if (!seen.insert({slot.from.handle, slot.from.part}).second)
          return fail("a staged block's old granule is reused");
        if (home_taken(slot.from)) return fail("two granules share a home");
        ++held;
      }
    }
  }
  bool pooled_whole = true;
  bool pooled_once = true;
  bool homes_apart = true;
  pools_.for_each([&](const Granule& piece) {
    pooled_whole = pooled_whole && piece.part == 0;
    for (uint32_t part = 0; part < piece.span; ++part) {
      const Granule granule = part_of(piece, part);
      pooled_once = seen.insert({granule.handle, granule.part}).second && pooled_once;
      homes_apart = !home_taken(granule) && homes_apart;
      ++held;
    }
  });
  if (staged_blocks != staged_blocks_.load(std::memory_order_relaxed))
    return fail("the count of staged blocks is not the books'");
  if (!pooled_whole) return fail("part of a chunk is pooled");
  if (!pooled_once) return fail("a pooled granule is also in use");
  if (!homes_apart) return fail("two granules share a home");
  if (created_ != released_ + leaked_granules_ + held)
    return fail("created granules (" + std::to_string(created_) +
                ") are not released + leaked + held (" + std::to_string(released_) + " + " +
                std::to_string(leaked_granules_) + " + " + std::to_string(held) + ")");
  // A leaked granule may keep its home mapped (the driver refused to vacate it): only then may
  // the mover map more homes than the books know.
  const uint64_t mapped_homes = mover_.homes();
  if (homes.size() > mapped_homes || (leaked_granules_ == 0 && homes.size() != mapped_homes))
    return fail("the books know " + std::to_string(homes.size()) + " homes, the mover maps " +
                std::to_string(mapped_homes));
  return true;
}

}  // namespace vramspill::tiers
