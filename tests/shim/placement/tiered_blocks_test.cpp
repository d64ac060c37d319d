// placement/tiered_blocks over tiered placement on fake VMM calls, the shim's own budgets (the
// ledger and the host budget) and a fake call stack: which allocations tiered mode takes, the
// [[tiered.rule]] a block falls under (by size, by the stack that allocated it, and what happens
// without a stack), and the books a tiered block is written in (Note [A tiered block in the
// books]).
#include "placement/tiered_blocks.h"

#include <gtest/gtest.h>

#include <optional>
#include <string_view>
#include <vector>

#include "placement_fakes.h"
#include "tiered_on_fake_vmm.h"

namespace vramspill::placement {
namespace {

using core::Route;
using tiers::kGranuleBytes;

// A stack the test sets, or none.
class FakeCallSites final : public CallSites {
 public:
  std::vector<CallFrame> frames;
  bool available = true;
  int captures = 0;

  bool capture(CallStack& stack, std::string_view& why) noexcept override {
    ++captures;
    if (!available) {
      why = "no libunwind";
      return false;
    }
    stack.count = frames.size();
    for (std::size_t i = 0; i < frames.size(); ++i) stack.frames[i] = frames[i];
    return true;
  }
};

// prefer_host for blocks of [min_size, max_size] bytes.
TieredRule host_by_size(uint64_t min_size, uint64_t max_size, const char* place) {
  TieredRule rule;
  rule.action = RuleAction::kPreferHost;
  rule.min_size = min_size;
  rule.max_size = max_size;
  rule.place = place;
  return rule;
}

// prefer_host for blocks allocated through a library matching `library`.
TieredRule host_by_library(const char* library, const char* place) {
  TieredRule rule;
  rule.action = RuleAction::kPreferHost;
  rule.library = library;
  rule.place = place;
  return rule;
}

class TieredBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.spill.mode = SpillMode::kTiered;
    config_.tiered.min_size = kGranuleBytes;
  }
  void TearDown() override { tiered_.expect_consistent_arena(); }

  // Tiered blocks under `rules`, in the file's order.
  TieredBlocks& blocks(std::vector<TieredRule> rules = {}) {
    config_.tiered.rules = std::move(rules);
    rules_.emplace(config_.tiered.rules);
    return blocks_.emplace(config_, ledger_, use_, tiered_.host_budget, tiered_.placement,
                           tiered_.prefetch, *rules_, call_sites_);
  }

  std::optional<CUresult> allocate(TieredBlocks& tiered, uint64_t bytes) {
    return tiered.allocate(0, bytes, &base_);
  }
  uint64_t host_granules(CUdeviceptr base) {
    return arena_.block_containing(base)->host_granules();
  }
  LogCapture log_;
  Config config_;
  TieredOnFakeVmm tiered_;
  core::Ledger& ledger_ = tiered_.ledger;
  core::UseTracker& use_ = tiered_.use;
  tiers::GranuleArena& arena_ = tiered_.arena;
  FakeCallSites call_sites_;
  std::optional<TieredRules> rules_;
  std::optional<TieredBlocks> blocks_;
  CUdeviceptr base_ = 0;
};

TEST_F(TieredBlocksTest, ATieredBlockIsRecordedAndTracked) {
  TieredBlocks& tiered = blocks();
  ASSERT_EQ(allocate(tiered, 3 * kGranuleBytes), CUDA_SUCCESS);
  EXPECT_NE(base_, 0u);
  const std::optional<core::Allocation> recorded_block = ledger_.find(base_);
  ASSERT_TRUE(recorded_block.has_value());
  EXPECT_EQ(recorded_block->route, Route::kTiered);
  EXPECT_EQ(recorded_block->bytes, 3 * kGranuleBytes);
  EXPECT_EQ(use_.tracked(), 1u);
  EXPECT_EQ(ledger_.snapshot(0).tiered_bytes, 3 * kGranuleBytes)
      << "the budget counts the arena's granules, not the block's bytes a second time";
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 3 * kGranuleBytes);
}

// Note [The prefetch mover] in placement/prefetch_placement.h: a device it cannot serve keeps the
// arena, with nothing said (the mover said why once when it chose).
TEST_F(TieredBlocksTest, WithThePrefetchMoverADeviceItCannotServeGetsTheArena) {
  config_.tiered.mover = TieredMover::kPrefetch;
  TieredBlocks& tiered = blocks();
  ASSERT_EQ(allocate(tiered, 2 * kGranuleBytes), CUDA_SUCCESS);
  EXPECT_TRUE(arena_.block_containing(base_).has_value());
  EXPECT_EQ(log_.text().find("prefetch mover could not"), std::string::npos);
  ASSERT_TRUE(ledger_.on_freed(base_).has_value());
  EXPECT_EQ(tiered.free(0, base_), CUDA_SUCCESS);
  EXPECT_FALSE(arena_.block_containing(base_).has_value());
}

TEST_F(TieredBlocksTest, AFreedBlockLeavesTheTrackerAndTheArena) {
  TieredBlocks& tiered = blocks();
  ASSERT_EQ(allocate(tiered, 2 * kGranuleBytes), CUDA_SUCCESS);
  ASSERT_TRUE(ledger_.on_freed(base_).has_value());  // as the admission flow does first
  EXPECT_EQ(tiered.free(0, base_), CUDA_SUCCESS);
  EXPECT_EQ(use_.tracked(), 0u);
  EXPECT_FALSE(arena_.block_containing(base_).has_value());
  EXPECT_EQ(tiered.free(0, base_), CUDA_ERROR_INVALID_VALUE) << "freed once";
}

TEST_F(TieredBlocksTest, AReusedBlockIsRecordedAgainAndStaysTracked) {
  TieredBlocks& tiered = blocks();
  ASSERT_EQ(allocate(tiered, 2 * kGranuleBytes), CUDA_SUCCESS);
  ASSERT_TRUE(ledger_.on_freed(base_).has_value());  // kept for reuse: still in the arena
  tiered.reused(0, base_, 2 * kGranuleBytes);
  const std::optional<core::Allocation> again = ledger_.find(base_);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->route, Route::kTiered);
  EXPECT_EQ(use_.tracked(), 1u);
  EXPECT_EQ(recorded(ledger_, Route::kTiered).allocations, 2u);
}

TEST_F(TieredBlocksTest, OnlyTieredModeTakesBlocksOfAtLeastItsMinimumSize) {
  TieredBlocks& tiered = blocks();
  EXPECT_EQ(allocate(tiered, kGranuleBytes / 2), std::nullopt);
  EXPECT_EQ(tiered.allocate(1, kGranuleBytes, &base_), std::nullopt) << "no arena on device 1";
  config_.spill.mode = SpillMode::kAuto;
  EXPECT_EQ(allocate(tiered, kGranuleBytes), std::nullopt);
  EXPECT_EQ(recorded(ledger_, Route::kTiered).live_count, 0u);
  EXPECT_EQ(use_.tracked(), 0u);
}

TEST_F(TieredBlocksTest, ABlockNoBudgetHoldsGoesBackToTheCallerWithOneLine) {
  TieredBlocks& tiered = blocks();
  EXPECT_EQ(allocate(tiered, 100 * kGranuleBytes), std::nullopt);
  EXPECT_EQ(allocate(tiered, 100 * kGranuleBytes), std::nullopt);
  const std::string log = log_.text();
  const std::size_t first = log.find("fit neither the device budget nor the host limit");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("fit neither", first + 1), std::string::npos) << "said once";
  EXPECT_EQ(recorded(ledger_, Route::kTiered).live_count, 0u);
}

TEST_F(TieredBlocksTest, ARuleBySizeDecidesWithoutAStack) {
  TieredBlocks& tiered =
      blocks({host_by_size(2 * kGranuleBytes, 2 * kGranuleBytes, "job.toml:1:1")});
  ASSERT_EQ(allocate(tiered, 2 * kGranuleBytes), CUDA_SUCCESS);
  EXPECT_EQ(host_granules(base_), 2u) << "prefer_host places it on the host";
  ASSERT_EQ(allocate(tiered, kGranuleBytes), CUDA_SUCCESS);
  EXPECT_EQ(host_granules(base_), 0u) << "outside the rule's sizes";
  EXPECT_EQ(call_sites_.captures, 0) << "no rule names a call site";
}

TEST_F(TieredBlocksTest, ARuleByLibraryMatchesTheStackThatAllocated) {
  TieredBlocks& tiered = blocks({host_by_library("libnccl.so*", "job.toml:1:1")});
  call_sites_.frames = {{.library = "libtorch_cuda.so", .symbol = "alloc"}};
  ASSERT_EQ(allocate(tiered, kGranuleBytes), CUDA_SUCCESS);
  EXPECT_EQ(host_granules(base_), 0u);
  call_sites_.frames.push_back({.library = "libnccl.so.2", .symbol = "ncclCommInitRank"});
  ASSERT_EQ(allocate(tiered, kGranuleBytes), CUDA_SUCCESS);
  EXPECT_EQ(host_granules(base_), 1u);
  EXPECT_EQ(call_sites_.captures, 2);
  EXPECT_NE(rules_->summary().find("matched 1 block"), std::string::npos) << rules_->summary();
}

TEST_F(TieredBlocksTest, WithoutAStackOnlyRulesBySizeApplyAndTheLogSaysSoOnce) {
  TieredBlocks& tiered = blocks({host_by_library("libnccl.so*", "job.toml:1:1"),
                                 host_by_size(2 * kGranuleBytes, UINT64_MAX, "job.toml:5:1")});
  call_sites_.available = false;
  ASSERT_EQ(allocate(tiered, kGranuleBytes), CUDA_SUCCESS);
  EXPECT_EQ(host_granules(base_), 0u);
  ASSERT_EQ(allocate(tiered, 2 * kGranuleBytes), CUDA_SUCCESS);
  EXPECT_EQ(host_granules(base_), 2u);
  const std::string log = log_.text();
  const std::size_t first = log.find("cannot match: no call stack (no libunwind)");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("cannot match", first + 1), std::string::npos) << "said once";
}

}  // namespace
}  // namespace vramspill::placement
