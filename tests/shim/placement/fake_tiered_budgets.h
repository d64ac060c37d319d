// Tiered budgets for the placement tests (placement::TieredBudgets): they refuse past their
// limits, as the ledger and the host budget do, and fail the test when more is given back than
// was taken.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "placement/tiered_placement.h"

namespace vramspill::placement {

// Budgets that refuse past their limits.
class FakeBudgets final : public TieredBudgets {
 public:
  FakeBudgets(uint64_t device_limit, uint64_t host_limit)
      : device_limit_(device_limit), host_limit_(host_limit) {}

  uint64_t device_room(int) noexcept override { return device_limit_ - device_; }
  bool take_device(int, uint64_t bytes) noexcept override {
    if (device_ + bytes > device_limit_) return false;
    device_ += bytes;
    return true;
  }
  void give_device(int, uint64_t bytes) noexcept override {
    EXPECT_LE(bytes, device_);
    device_ -= bytes;
  }
  bool take_host(uint64_t bytes) noexcept override {
    if (host_ + bytes > host_limit_) return false;
    host_ += bytes;
    return true;
  }
  void give_host(uint64_t bytes) noexcept override {
    EXPECT_LE(bytes, host_);
    host_ -= bytes;
  }

  uint64_t device() const { return device_; }
  uint64_t host() const { return host_; }

 private:
  uint64_t device_limit_;
  uint64_t host_limit_;
  uint64_t device_ = 0;
  uint64_t host_ = 0;
};

}  // namespace vramspill::placement
