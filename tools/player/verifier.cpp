#include "verifier.h"

#include <algorithm>
#include <cstring>

#include "driver_calls.h"

namespace vramspill::player {
namespace {

void note(std::optional<Mismatch>& mismatch, uint64_t element, uint64_t found,
          uint64_t expected) {
  if (!mismatch) mismatch = Mismatch{element, found, expected, 0};
  ++mismatch->differing;
}

}  // namespace

Verifier::Verifier(size_t staging_bytes) : staging_(std::max<size_t>(staging_bytes / 8, 1)) {}

std::optional<Mismatch> Verifier::verify(CUdeviceptr address, uint64_t bytes,
                                         const BlockContents& contents, CUstream stream) {
  std::optional<Mismatch> mismatch;
  const uint64_t initial = contents.initial_element();
  const uint64_t words = bytes / 8;
  const uint64_t chunk_words = staging_.size();
  for (uint64_t first = 0; first < words; first += chunk_words) {
    const uint64_t count = std::min(chunk_words, words - first);
    check(cuMemcpyDtoHAsync(staging_.data(), address + first * 8, count * 8, stream),
          "cuMemcpyDtoHAsync");
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    // value(initial, i) = mul * initial + add + index * i: one addition per element.
    uint64_t expected = contents.map.value(initial, first);
    for (uint64_t i = 0; i < count; ++i, expected += contents.map.index)
      if (staging_[i] != expected) note(mismatch, first + i, staging_[i], expected);
  }
  if (const uint64_t tail = bytes % 8; tail != 0) {
    uint64_t found = 0;
    uint64_t expected = 0;
    check(cuMemcpyDtoHAsync(&found, address + words * 8, tail, stream), "cuMemcpyDtoHAsync");
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    std::memcpy(&expected, &initial, tail);
    if (found != expected) note(mismatch, words, found, expected);
  }
  bytes_verified_ += bytes;
  return mismatch;
}

}  // namespace vramspill::player
