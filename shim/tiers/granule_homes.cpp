#include "tiers/granule_homes.h"

#include <algorithm>
#include <new>
#include <span>

namespace vramspill::tiers {

GranuleHomes::~GranuleHomes() {
  for (const CUdeviceptr range : ranges_) ops_.unreserve(range, kRangeGranules * kGranuleBytes);
}

CUdeviceptr GranuleHomes::take_free() noexcept {
  const std::lock_guard lock(mutex_);
  if (!vacated_.empty()) {
    const CUdeviceptr home = vacated_.back();
    vacated_.pop_back();
    return home;
  }
  if (next_ == range_end_) {
    try {
      ranges_.reserve(ranges_.size() + 1);
    } catch (const std::bad_alloc&) {
      return 0;
    }
    CUdeviceptr range = 0;
    if (ops_.reserve(kRangeGranules * kGranuleBytes, &range) != CUDA_SUCCESS) return 0;
    ranges_.push_back(range);
    next_ = range;
    range_end_ = range + kRangeGranules * kGranuleBytes;
  }
  const CUdeviceptr home = next_;
  next_ += kGranuleBytes;
  return home;
}

CUresult GranuleHomes::settle(GranuleHandle handle, CUdeviceptr* home) noexcept {
  const CUdeviceptr free_home = take_free();
  if (free_home == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = ops_.map(free_home, std::span(&handle, 1));
  const std::lock_guard lock(mutex_);
  if (result != CUDA_SUCCESS) {
    try {
      vacated_.push_back(free_home);
    } catch (const std::bad_alloc&) {  // a home never handed out again: address space only
    }
    return result;
  }
  ++settled_;
  *home = free_home;
  return CUDA_SUCCESS;
}

bool GranuleHomes::vacate(CUdeviceptr home) noexcept {
  if (ops_.unmap(home, 1) != CUDA_SUCCESS) return false;
  const std::lock_guard lock(mutex_);
  --settled_;
  try {
    vacated_.push_back(home);
  } catch (const std::bad_alloc&) {  // as in settle()
  }
  return true;
}

bool GranuleHomes::follows(CUdeviceptr home, CUdeviceptr previous) const noexcept {
  if (previous == 0 || home != previous + kGranuleBytes) return false;
  const std::lock_guard lock(mutex_);
  return std::ranges::any_of(ranges_, [&](CUdeviceptr range) {
    return previous >= range && home < range + kRangeGranules * kGranuleBytes;
  });
}

uint64_t GranuleHomes::settled() const noexcept {
  const std::lock_guard lock(mutex_);
  return settled_;
}

}  // namespace vramspill::tiers
