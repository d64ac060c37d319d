// What the admission flow's tests share (placement/admission_flow.h): tiered mode's seam as a
// test sets it.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "core/ledger.h"
#include "placement/admission_flow.h"

namespace vramspill::placement {

// Tiered mode as a test sets it: the room its arena holds (taken from the ledger, as the arena
// takes it), as much of it given back as is asked for, and the blocks it was asked to free.
class FakeTieredSeam final : public TieredSeam {
 public:
  explicit FakeTieredSeam(core::Ledger& ledger) : ledger_(ledger) {}

  void hold(uint64_t bytes) {
    ASSERT_TRUE(ledger_.take(0, bytes));
    held_ += bytes;
  }

  int room_requests = 0;
  std::vector<CUdeviceptr> freed;

  bool make_device_room(int device, uint64_t bytes) noexcept override {
    ++room_requests;
    if (held_ < bytes) return false;
    ledger_.give(device, bytes);
    held_ -= bytes;
    return true;
  }
  CUresult free_block(const core::Allocation& block, std::optional<CUstream>) noexcept override {
    freed.push_back(block.key);
    return CUDA_SUCCESS;
  }

 private:
  core::Ledger& ledger_;
  uint64_t held_ = 0;
};

}  // namespace vramspill::placement
