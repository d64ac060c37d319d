#include "tiers/granule_homes.h"

#include <algorithm>
#include <new>
#include <span>

namespace vramspill::tiers {

GranuleHomes::~GranuleHomes() {
  for (const CUdeviceptr range : ranges_) ops_.unreserve(range, kRangeGranules * kGranuleBytes);
}

CUdeviceptr GranuleHomes::take_free(uint64_t granules) noexcept {
  if (granules > kRangeGranules) return 0;
  const std::lock_guard lock(mutex_);
  const auto vacated = std::ranges::find(vacated_, granules, &Vacated::granules);
  if (vacated != vacated_.end()) {
    const CUdeviceptr home = vacated->home;
    vacated_.erase(vacated);
    return home;
  }
  if (range_end_ - next_ < granules * kGranuleBytes) {
    try {
      ranges_.reserve(ranges_.size() + 1);
      // What the last range has left serves singles (a chunk needs its homes in one range).
      vacated_.reserve(vacated_.size() + (range_end_ - next_) / kGranuleBytes);
    } catch (const std::bad_alloc&) {
      return 0;
    }
    CUdeviceptr range = 0;
    if (ops_.reserve(kRangeGranules * kGranuleBytes, &range) != CUDA_SUCCESS) return 0;
    for (; next_ != range_end_; next_ += kGranuleBytes)
      vacated_.push_back({.home = next_, .granules = 1});
    ranges_.push_back(range);
    next_ = range;
    range_end_ = range + kRangeGranules * kGranuleBytes;
  }
  const CUdeviceptr home = next_;
  next_ += granules * kGranuleBytes;
  return home;
}

void GranuleHomes::free_home(CUdeviceptr home, uint64_t granules) noexcept {
  try {
    vacated_.push_back({.home = home, .granules = granules});
  } catch (const std::bad_alloc&) {  // a home never handed out again: address space only
  }
}

CUresult GranuleHomes::settle(Mapping handle, CUdeviceptr* home) noexcept {
  const CUdeviceptr free = take_free(handle.granules);
  if (free == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = ops_.map(free, std::span(&handle, 1));
  const std::lock_guard lock(mutex_);
  if (result != CUDA_SUCCESS) {
    free_home(free, handle.granules);
    return result;
  }
  settled_ += handle.granules;
  *home = free;
  return CUDA_SUCCESS;
}

bool GranuleHomes::vacate(CUdeviceptr home, uint64_t granules) noexcept {
  if (ops_.unmap(home, granules) != CUDA_SUCCESS) return false;
  const std::lock_guard lock(mutex_);
  settled_ -= granules;
  free_home(home, granules);
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
