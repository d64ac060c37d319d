#include "tiers/granule_chunks.h"

namespace vramspill::tiers {

std::vector<PieceShape> block_layout(uint64_t count, uint64_t device_count, ChunkSizes sizes) {
  const uint64_t chunk = sizes.chunk_granules;
  const uint64_t chunks = chunk > 1 && count >= sizes.chunked_block_granules ? count / chunk : 0;
  const auto kind_of = [&](uint64_t index) {
    return index < device_count ? GranuleKind::kDevice : GranuleKind::kHost;
  };
  std::vector<PieceShape> layout;
  layout.reserve(count);
  uint64_t index = 0;
  for (uint64_t position = 0; position < chunks; ++position, index += chunk) {
    // A position the device part ends inside takes singles: the first device_count on the device.
    if (kind_of(index) == kind_of(index + chunk - 1)) {
      layout.push_back({.kind = kind_of(index), .granules = sizes.chunk_granules});
      continue;
    }
    for (uint64_t i = index; i < index + chunk; ++i) layout.push_back({.kind = kind_of(i)});
  }
  for (; index < count; ++index) layout.push_back({.kind = kind_of(index)});
  return layout;
}

Granule part_of(const Granule& piece, uint32_t part) {
  Granule granule = piece;
  granule.part = part;
  if (piece.home != 0) granule.home = piece.home + part * kGranuleBytes;
  return granule;
}

void append_granules(const Granule& piece, std::vector<Granule>& granules) {
  for (uint32_t part = 0; part < piece.span; ++part) granules.push_back(part_of(piece, part));
}

Granule whole_piece(const Granule& granule) {
  Granule piece = granule;
  piece.part = 0;
  if (granule.home != 0) piece.home = granule.home - granule.part * kGranuleBytes;
  return piece;
}

}  // namespace vramspill::tiers
