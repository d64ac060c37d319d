// The public methods hold every policy to the contract (Note [Decisions are checked]): a
// test-only policy that decides whatever the test tells it to.
#include <gtest/gtest.h>

#include <new>
#include <span>
#include <string_view>
#include <vector>

#include "policies/eviction_policy.h"

namespace vramspill::policies {
namespace {

using Blocks = std::vector<BlockId>;

class ScriptedPolicy final : public EvictionPolicy {
 public:
  explicit ScriptedPolicy(InvariantMode mode) : EvictionPolicy({4, mode}) {}

  Blocks victims;              // what do_choose_victims returns
  bool promote = true;         // what do_should_promote returns
  bool out_of_memory = false;  // whether do_allocated throws std::bad_alloc
  Blocks last_used;            // what do_used was told

 private:
  std::string_view do_name() const noexcept override { return "scripted"; }
  void do_allocated(BlockId, uint64_t, bool) override {
    if (out_of_memory) throw std::bad_alloc();
  }
  void do_freed(BlockId) override {}
  void do_used(uint64_t, uint32_t, std::span<const BlockId> blocks) override {
    last_used.assign(blocks.begin(), blocks.end());
  }
  void do_moved(BlockId, uint64_t) override {}
  Blocks do_choose_victims(uint64_t, std::span<const BlockId>) override { return victims; }
  bool do_should_promote(BlockId) override { return promote; }
};

// Blocks 1 and 2 on the device (2 granules each), 3 on the host.
void allocate_three(ScriptedPolicy& policy) {
  policy.allocated(1, 2, true);
  policy.allocated(2, 2, true);
  policy.allocated(3, 2, false);
}

TEST(ValidationTest, BadVictimsAreCountedAndDropped) {
  ScriptedPolicy policy(InvariantMode::kCountAndDrop);
  allocate_three(policy);
  policy.victims = {1, 1, 2, 3, 99};  // twice, kept, on the host, unknown
  const Victims victims = policy.choose_victims(2, Blocks{2});
  EXPECT_EQ(victims.blocks, Blocks{1});
  EXPECT_EQ(victims.granules, 2u);
  EXPECT_TRUE(victims.enough);
  EXPECT_EQ(policy.stats().victims_chosen, 1u);
  EXPECT_EQ(policy.stats().invalid_decisions, 4u);
  EXPECT_EQ(policy.last_problem(), "chose a victim that is not live: block 99");
}

TEST(ValidationTest, FallingShortIsWrongOnlyWhenEnoughWasEvictable) {
  ScriptedPolicy policy(InvariantMode::kCountAndDrop);
  allocate_three(policy);
  policy.victims = {1};
  EXPECT_FALSE(policy.choose_victims(4, Blocks{}).enough);
  EXPECT_EQ(policy.stats().invalid_decisions, 1u);
  // With block 2 kept, block 1 is all there is: short, and right.
  EXPECT_FALSE(policy.choose_victims(4, Blocks{2}).enough);
  EXPECT_EQ(policy.stats().invalid_decisions, 1u);
  EXPECT_EQ(policy.stats().short_requests, 2u);
}

TEST(ValidationTest, APromotionLargerThanTheBudgetIsRefused) {
  ScriptedPolicy policy(InvariantMode::kCountAndDrop);
  policy.allocated(1, 5, false);  // the budget is 4 granules
  EXPECT_FALSE(policy.should_promote(1));
  EXPECT_EQ(policy.stats().invalid_decisions, 1u);
  EXPECT_EQ(policy.stats().promotions_refused, 1u);
}

TEST(ValidationTest, EventsNamingUnknownBlocksAreCountedAndDropped) {
  ScriptedPolicy policy(InvariantMode::kCountAndDrop);
  allocate_three(policy);
  policy.used(1, 0, Blocks{1, 42, 3});
  EXPECT_EQ(policy.last_used, (Blocks{1, 3}));
  policy.freed(42);
  policy.moved(42, 0);
  policy.moved(1, 3);                      // more than its 2 granules
  policy.allocated(1, 2, true);            // already live
  policy.allocated(7, 0, true);            // no granules
  EXPECT_FALSE(policy.should_promote(1));  // nothing on the host
  EXPECT_EQ(policy.stats().invalid_events, 7u);
  EXPECT_EQ(policy.stats().invalid_decisions, 0u);
  // The books are as they were: blocks 1 and 2 hold 4 device granules.
  policy.victims = {1, 2};
  EXPECT_EQ(policy.choose_victims(4, Blocks{}).granules, 4u);
}

TEST(ValidationTest, AnAllocationThePolicyCouldNotRecordLeavesNoTrace) {
  ScriptedPolicy policy(InvariantMode::kCountAndDrop);
  allocate_three(policy);
  policy.out_of_memory = true;
  EXPECT_THROW(policy.allocated(4, 2, true), std::bad_alloc);
  policy.out_of_memory = false;
  // Block 4 is not live: a launch of it is dropped, its granules are not among those that could
  // make room (only block 1's, with 2 kept), and it may be allocated again.
  policy.used(1, 0, Blocks{4});
  EXPECT_EQ(policy.stats().invalid_events, 1u);
  policy.victims = {1};
  EXPECT_FALSE(policy.choose_victims(4, Blocks{2}).enough);
  EXPECT_EQ(policy.stats().invalid_decisions, 0u);
  policy.allocated(4, 2, true);
  EXPECT_EQ(policy.stats().invalid_events, 1u);
}

TEST(ValidationDeathTest, AbortModeStopsAtTheFirstBadVictim) {
  ScriptedPolicy policy(InvariantMode::kAbort);
  allocate_three(policy);
  policy.victims = {2, 1};
  EXPECT_DEATH(policy.choose_victims(2, Blocks{1}),
               "eviction policy scripted chose a victim the launch keeps: block 1");
}

TEST(ValidationDeathTest, AbortModeStopsAtTheFirstBadEvent) {
  ScriptedPolicy policy(InvariantMode::kAbort);
  EXPECT_DEATH(policy.freed(42), "eviction policy scripted freed an unknown block 42");
}

}  // namespace
}  // namespace vramspill::policies
