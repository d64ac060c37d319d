#include "stress_blocks.h"

#include "spill_support.h"  // spill::pattern

namespace stress {

namespace {

// cuMemAllocPitch's rows: a width that is rarely a multiple of the pitch alignment, so the
// padding is part of what is filled and checked.
constexpr std::size_t kPitchRows = 64;

CUresult allocate_vmm(Block& block, const Shared& shared) {
  block.bytes =
      (block.bytes + shared.vmm_granularity - 1) / shared.vmm_granularity * shared.vmm_granularity;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, shared.device};
  if (const CUresult result = cuMemAddressReserve(&block.pointer, block.bytes, 0, 0, 0);
      result != CUDA_SUCCESS)
    return result;
  CUresult result = cuMemCreate(&block.handle, block.bytes, &prop, 0);
  if (result == CUDA_SUCCESS) {
    result = cuMemMap(block.pointer, block.bytes, 0, block.handle, 0);
    if (result == CUDA_SUCCESS) {
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      result = cuMemSetAccess(block.pointer, block.bytes, &access, 1);
      if (result == CUDA_SUCCESS) return result;
      cuMemUnmap(block.pointer, block.bytes);
    }
    cuMemRelease(block.handle);
  }
  cuMemAddressFree(block.pointer, block.bytes);
  return result;
}

}  // namespace

const char* route_name(Route route) {
  switch (route) {
    case Route::kAlloc:
      return "cuMemAlloc";
    case Route::kPitch:
      return "cuMemAllocPitch";
    case Route::kManaged:
      return "cuMemAllocManaged";
    case Route::kAsync:
      return "cuMemAllocAsync";
    case Route::kFromPool:
      return "cuMemAllocFromPoolAsync";
    case Route::kVmm:
      return "cuMemCreate";
  }
  return "?";
}

CUresult allocate(Block& block, const Shared& shared, CUstream stream) {
  switch (block.route) {
    case Route::kAlloc:
      return cuMemAlloc(&block.pointer, block.bytes);
    case Route::kPitch: {
      std::size_t pitch = 0;
      const CUresult result =
          cuMemAllocPitch(&block.pointer, &pitch, block.bytes / kPitchRows, kPitchRows, 4);
      block.bytes = pitch * kPitchRows;
      return result;
    }
    case Route::kManaged:
      return cuMemAllocManaged(&block.pointer, block.bytes, CU_MEM_ATTACH_GLOBAL);
    case Route::kAsync:
      block.stream = stream;
      return cuMemAllocAsync(&block.pointer, block.bytes, stream);
    case Route::kFromPool:
      block.stream = stream;
      return cuMemAllocFromPoolAsync(&block.pointer, block.bytes, shared.pool, stream);
    case Route::kVmm:
      return allocate_vmm(block, shared);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

uint32_t expected_word(const Block& block, std::size_t j) {
  // A memset's word: the pattern at a position no copy reaches.
  return spill::pattern(block.seed, block.constant ? ~std::size_t{0} : j);
}

CUresult fill(Block& block, CUstream stream, std::mt19937_64& random,
              std::vector<uint32_t>& scratch) {
  const std::size_t words = block.bytes / sizeof(uint32_t);
  block.constant = random() % 2 == 0;
  const bool synchronous = !is_stream_ordered(block.route) && random() % 2 == 0;
  if (!is_stream_ordered(block.route)) block.stream = synchronous ? nullptr : stream;
  if (block.constant) {
    const uint32_t word = expected_word(block, 0);
    return synchronous ? cuMemsetD32(block.pointer, word, words)
                       : cuMemsetD32Async(block.pointer, word, words, block.stream);
  }
  scratch.resize(words);
  for (std::size_t j = 0; j < words; ++j) scratch[j] = expected_word(block, j);
  // Pageable memory: the asynchronous copy stages it at the call, so scratch is free again.
  return synchronous ? cuMemcpyHtoD(block.pointer, scratch.data(), block.bytes)
                     : cuMemcpyHtoDAsync(block.pointer, scratch.data(), block.bytes, block.stream);
}

CUresult check(const Block& block, std::vector<uint32_t>& scratch, Mismatch& mismatch) {
  const std::size_t words = block.bytes / sizeof(uint32_t);
  scratch.resize(words);
  CUresult result = CUDA_SUCCESS;
  if (block.stream == nullptr) {
    result = cuMemcpyDtoH(scratch.data(), block.pointer, block.bytes);
  } else {
    result = cuMemcpyDtoHAsync(scratch.data(), block.pointer, block.bytes, block.stream);
    if (result == CUDA_SUCCESS) result = cuStreamSynchronize(block.stream);
  }
  if (result != CUDA_SUCCESS) return result;
  mismatch = {};
  for (std::size_t j = 0; j < words; ++j) {
    if (scratch[j] == expected_word(block, j)) continue;
    if (mismatch.words++ == 0) mismatch = {1, j, scratch[j]};
  }
  return CUDA_SUCCESS;
}

CUresult release(const Block& block, CUstream stream) {
  switch (block.route) {
    case Route::kAlloc:
    case Route::kPitch:
      return stream == nullptr ? cuMemFree(block.pointer) : cuMemFreeAsync(block.pointer, stream);
    case Route::kManaged:
      return cuMemFree(block.pointer);
    case Route::kAsync:
    case Route::kFromPool:
      return cuMemFreeAsync(block.pointer, stream);
    case Route::kVmm: {
      CUresult result = cuMemUnmap(block.pointer, block.bytes);
      if (const CUresult released = cuMemRelease(block.handle); result == CUDA_SUCCESS)
        result = released;
      if (const CUresult freed = cuMemAddressFree(block.pointer, block.bytes);
          result == CUDA_SUCCESS)
        result = freed;
      return result;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace stress
