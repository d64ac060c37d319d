// What a played block must hold, and the check that it does, element by element.
//
// A block starts with every byte equal to its fill (cuMemsetD8 at its allocation); each launch
// that names it applies vs_touch's affine map to every 8-byte element (tools/simcuda/kernels/
// vs_touch.h), so element i holds map.value(fill repeated 8 times, i). Bytes past the last whole
// element (a size that is not a multiple of 8) are never touched and keep the fill. The block is
// copied back through one staging buffer, a chunk at a time, so host memory does not grow with
// the blocks.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "vs_touch.h"

namespace vramspill::player {

struct BlockContents {
  unsigned char fill = 0;
  VsTouchMap map;

  uint64_t initial_element() const { return fill * 0x0101010101010101ULL; }
};

// The first element of a block that differs from its prediction (element `words` stands for the
// bytes past the last whole element), and how many differ.
struct Mismatch {
  uint64_t element = 0;
  uint64_t found = 0;
  uint64_t expected = 0;
  uint64_t differing = 0;
};

class Verifier {
 public:
  explicit Verifier(size_t staging_bytes);

  // Copies the block of `bytes` at `address` back on `stream`, after the work queued there, and
  // compares it with `contents`. nullopt when every byte matches. Throws DriverError.
  std::optional<Mismatch> verify(CUdeviceptr address, uint64_t bytes,
                                 const BlockContents& contents, CUstream stream);

  uint64_t bytes_verified() const { return bytes_verified_; }

 private:
  std::vector<uint64_t> staging_;
  uint64_t bytes_verified_ = 0;
};

}  // namespace vramspill::player
