// The prefetch mover's evictions in part (Note [Evicting part of a block] in
// policies/eviction_policy.h, Note [The prefetch mover] in placement/prefetch_placement.h), over
// fake prefetch calls and fake budgets with the real learned, which lets its last victim give up
// only the pages a need leaves: the victim's last pages go to the host, the books, the budget,
// the trace and the stats count exactly the pages moved, a promotion brings in the rest with a
// prefetch of the whole block, and each move's pages are those the remap mover moves for the
// same decisions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../tiers/fake_granule_ops.h"
#include "core/remap_window.h"
#include "fake_tiered_budgets.h"
#include "one_arena.h"
#include "placement/prefetch_placement.h"
#include "placement/tiered_placement.h"
#include "prefetch_fakes.h"
#include "tiers/granule_arena.h"

namespace vramspill::placement {
namespace {

using tiers::kGranuleBytes;

constexpr uint64_t kPages = 4;
constexpr uint64_t kBlock = kPages * kGranuleBytes;  // 8 MiB

TieredOptions learned(TieredAdmission admission = TieredAdmission::kWeighed) {
  return {.policy = "learned",
          .admission = admission,
          .invariant_mode = policies::InvariantMode::kAbort};
}

class PrefetchInPartTest : public ::testing::Test {
 protected:
  PrefetchInPartTest() { placement_.set_events(&events_); }

  CUdeviceptr allocate(uint64_t bytes = kBlock, std::optional<RuleAction> rule = std::nullopt) {
    CUdeviceptr base = 0;
    EXPECT_EQ(placement_.allocate(0, bytes, &base, rule), CUDA_SUCCESS);
    return base;
  }
  void launch(uint64_t stream, std::initializer_list<CUdeviceptr> blocks) {
    core::SubmissionUse use;
    use.sequence = ++sequence_;
    use.stream = stream;
    for (const CUdeviceptr block : blocks) use.blocks[use.count++] = block;
    placement_.before_submission(use);
  }
  uint64_t device_bytes(CUdeviceptr base) { return placement_.device_bytes(base).value(); }
  FakePrefetchOps& ops() { return devices_.fake(); }
  static std::string line(const char* move, CUdeviceptr base, uint64_t bytes) {
    return std::string(move) + " " + std::to_string(base) + " " + std::to_string(bytes);
  }

  // Two blocks of four pages fill the budget, and `b` was used last: lru's order, which learned
  // follows before it has locked on a period, makes `a` the first victim.
  void fill_with_two_blocks() {
    a_ = allocate();
    b_ = allocate();
    launch(1, {b_});
    ASSERT_EQ(budgets_.device(), 2 * kBlock);
    ops().prefetches.clear();
    ops().ordered_streams.clear();
    events_.lines.clear();
  }

  FakeBudgets budgets_{2 * kBlock, 64 * kBlock};
  FakeDevices devices_;
  RecordedEvents events_;
  PrefetchPlacement placement_{budgets_, devices_, learned()};
  CUdeviceptr a_ = 0;
  CUdeviceptr b_ = 0;
  uint64_t sequence_ = 0;
};

TEST_F(PrefetchInPartTest, TheLastVictimGivesUpOnlyItsLastPagesTheNeedLeaves) {
  fill_with_two_blocks();
  ASSERT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  const std::vector<Prefetch> expected = {
      {a_, kGranuleBytes, /*to_device=*/false, {}, false, /*offset=*/3 * kGranuleBytes}};
  EXPECT_EQ(ops().prefetches, expected);
  EXPECT_EQ(device_bytes(a_), 3 * kGranuleBytes);
  EXPECT_EQ(device_bytes(b_), kBlock);
  EXPECT_EQ(budgets_.device(), 7 * kGranuleBytes);
  EXPECT_EQ(events_.lines, std::vector<std::string>{line("evict", a_, kGranuleBytes)});
  const PrefetchStats stats = placement_.stats();
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.evicted_bytes, kGranuleBytes);
  EXPECT_EQ(stats.evicted_in_part, 1u);
  const PrefetchPlacement::Held held = placement_.held(0);
  EXPECT_EQ(held.on_device, 2u);
  EXPECT_EQ(held.in_part, 1u);
  EXPECT_EQ(held.device_bytes, 7 * kGranuleBytes);
  EXPECT_EQ(held.host_bytes, kGranuleBytes);
  // The next need takes the pages before those, down to its first.
  ops().prefetches.clear();
  ASSERT_TRUE(placement_.make_device_room(0, 3 * kGranuleBytes));
  ASSERT_EQ(ops().prefetches.size(), 1u);
  EXPECT_EQ(ops().prefetches[0].offset, 1 * kGranuleBytes);
  EXPECT_EQ(ops().prefetches[0].size, 2 * kGranuleBytes);
  EXPECT_EQ(device_bytes(a_), kGranuleBytes);
  EXPECT_EQ(budgets_.device(), 5 * kGranuleBytes);
  EXPECT_EQ(placement_.stats().evicted_in_part, 2u);
  // Its first page goes too: that eviction is whole, from the first page on.
  ops().prefetches.clear();
  ASSERT_TRUE(placement_.make_device_room(0, 4 * kGranuleBytes));
  const std::vector<Prefetch> rest = {{a_, kGranuleBytes, /*to_device=*/false, {}}};
  EXPECT_EQ(ops().prefetches, rest);
  EXPECT_EQ(device_bytes(a_), 0u);
  EXPECT_EQ(placement_.stats().evicted_in_part, 2u);
  EXPECT_EQ(placement_.held(0).in_part, 0u);
}

// The last page of a block whose size is not whole pages is short: the eviction names only the
// bytes the allocation has (a prefetch past its end is the driver's error).
// A kept stream-ordered block with pages on the host is not reused (Note [Stream-ordered requests
// in the arena]): any_on_host() says so of a block in part too, as of an arena block with host
// granules.
TEST_F(PrefetchInPartTest, ABlockInPartHasPagesOnTheHost) {
  fill_with_two_blocks();
  EXPECT_EQ(placement_.any_on_host(a_), false);
  ASSERT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  EXPECT_EQ(placement_.any_on_host(a_), true);
  EXPECT_EQ(placement_.any_on_host(b_), false);
  EXPECT_EQ(placement_.any_on_host(a_ + kGranuleBytes), std::nullopt);  // no block starts there
}

TEST_F(PrefetchInPartTest, TheLastPageOfABlockOfUnevenSizeIsEvictedAsFarAsTheBlockGoes) {
  const CUdeviceptr uneven = allocate(kBlock - kGranuleBytes / 2);  // four pages, the last short
  b_ = allocate();
  launch(1, {b_});
  ops().prefetches.clear();
  ASSERT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  const std::vector<Prefetch> expected = {
      {uneven, kGranuleBytes / 2, /*to_device=*/false, {}, false, /*offset=*/3 * kGranuleBytes}};
  EXPECT_EQ(ops().prefetches, expected);
  EXPECT_EQ(device_bytes(uneven), 3 * kGranuleBytes);
  EXPECT_EQ(budgets_.device(), 7 * kGranuleBytes);
}

// Note [Promoting a block in part on the device]: the rest comes in by a prefetch of the whole
// block; the budget, the card check, the trace and the stats count only the pages that were on
// the host.
TEST_F(PrefetchInPartTest, APromotionOfABlockInPartBringsInTheRest) {
  fill_with_two_blocks();
  ASSERT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  const PrefetchStats before = placement_.stats();
  ops().prefetches.clear();
  events_.lines.clear();
  ops().free = kGranuleBytes;  // the card has room for the page on the host, not for the block
  launch(3, {a_});
  const std::vector<Prefetch> expected = {{a_, kBlock, /*to_device=*/true, {}}};
  EXPECT_EQ(ops().prefetches, expected);
  EXPECT_EQ(ops().ordered_streams, std::vector<uint64_t>{3});
  EXPECT_EQ(device_bytes(a_), kBlock);
  EXPECT_EQ(budgets_.device(), 2 * kBlock);
  EXPECT_EQ(events_.lines,
            (std::vector<std::string>{"use 3 1", line("promote", a_, kGranuleBytes)}));
  const PrefetchStats after = placement_.stats();
  EXPECT_EQ(after.promotions, before.promotions + 1);
  EXPECT_EQ(after.promoted_bytes, before.promoted_bytes + kGranuleBytes);
  EXPECT_EQ(after.held_by_the_card, 0u);
  EXPECT_EQ(placement_.held(0).in_part, 0u);
}

TEST_F(PrefetchInPartTest, AFreeGivesBackThePagesTheBlockHasOnTheDevice) {
  fill_with_two_blocks();
  ASSERT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  ASSERT_EQ(placement_.free(a_), CUDA_SUCCESS);
  EXPECT_EQ(budgets_.device(), kBlock);
  EXPECT_EQ(budgets_.host(), kBlock);
  EXPECT_EQ(placement_.held(0).device_bytes, kBlock);
}

TEST_F(PrefetchInPartTest, AnEvictionInPartTheDriverRefusesLeavesThePagesOnTheDevice) {
  fill_with_two_blocks();
  ops().fail_evictions = true;
  EXPECT_FALSE(placement_.make_device_room(0, kGranuleBytes));
  EXPECT_EQ(device_bytes(a_), kBlock);
  EXPECT_EQ(budgets_.device(), 2 * kBlock);
  EXPECT_EQ(placement_.stats().failed_prefetches, 1u);
  EXPECT_TRUE(events_.lines.empty());
}

// Note [Rules before the policy] in placement/tiered_placement.h: an evict_first block goes
// whole, before the policy is asked, as with the remap mover.
TEST_F(PrefetchInPartTest, AnEvictFirstBlockGoesWhole) {
  const CUdeviceptr first = allocate(kBlock, RuleAction::kEvictFirst);
  b_ = allocate();
  launch(1, {first});  // learned would now give up b's last page
  ops().prefetches.clear();
  ASSERT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  const std::vector<Prefetch> expected = {{first, kBlock, /*to_device=*/false, {1}}};
  EXPECT_EQ(ops().prefetches, expected);
  EXPECT_EQ(device_bytes(first), 0u);
  EXPECT_EQ(device_bytes(b_), kBlock);
  EXPECT_EQ(placement_.stats().evicted_in_part, 0u);
}

// Note [Launches after a promotion]: a block whose promotion may still be queued is still
// arriving after an eviction of its last pages, so a launch that touches it and promotes nothing
// still waits for the mover. Pinned blocks are never victims, in part or whole.
TEST_F(PrefetchInPartTest, ABlockEvictedInPartIsStillArriving) {
  ops().done = false;  // nothing the mover queued has run
  const CUdeviceptr a = allocate();
  const CUdeviceptr pinned = allocate(3 * kGranuleBytes, RuleAction::kPin);
  const CUdeviceptr also_pinned = allocate(2 * kGranuleBytes, RuleAction::kPin);
  // The second pin's room came from a's last page, in a promotion: nothing waited on the host.
  ASSERT_EQ(device_bytes(a), 3 * kGranuleBytes);
  ASSERT_EQ(device_bytes(pinned), 3 * kGranuleBytes);
  ASSERT_EQ(device_bytes(also_pinned), 2 * kGranuleBytes);
  ASSERT_EQ(ops().waits, 0);
  launch(5, {a});  // its last page cannot come back: only pinned blocks could make room
  EXPECT_EQ(device_bytes(a), 3 * kGranuleBytes);
  EXPECT_EQ(placement_.stats().promotions_refused, 1u);
  EXPECT_EQ(ops().ordered_streams, std::vector<uint64_t>{5});
}

// What the trace is told of each move, and so what the policy's books hold and `vramspill
// replay` reads: the same pages as the remap mover's for the same decisions. Both movers run the
// same blocks and launches with learned (and, for this mover, every promotion the policy asks
// for, as the remap mover has no admission), and their moves are compared by block.
class MovedPages final : public core::MemoryEvents {
 public:
  void device_configured(int, uint64_t, uint64_t) noexcept override {}
  void allocated(const core::Allocation& allocation) noexcept override {
    names.emplace(allocation.key, static_cast<char>('a' + names.size()));
  }
  void freed(const core::Allocation&) noexcept override {}
  void refused(int, core::Route, uint64_t) noexcept override {}
  void evicted(int, uint64_t base, uint64_t bytes) noexcept override {
    if (counting) moves.push_back(std::string("evict ") + names.at(base) + " " + pages(bytes));
  }
  void promoted(int, uint64_t base, uint64_t bytes) noexcept override {
    if (counting) moves.push_back(std::string("promote ") + names.at(base) + " " + pages(bytes));
  }
  void used(int, uint32_t, std::span<const uint64_t>) noexcept override {}

  static std::string pages(uint64_t bytes) { return std::to_string(bytes / kGranuleBytes); }

  std::map<uint64_t, char> names;  // blocks by the order of their allocations
  bool counting = false;           // once every block is placed
  std::vector<std::string> moves;
};

TEST(PrefetchInPartAsRemap, EachMoveTakesThePagesTheRemapMoverTakes) {
  constexpr uint64_t kBudget = 8 * kGranuleBytes;
  // 11 pages on 8: most promotions evict.
  constexpr uint64_t kSizes[] = {3 * kGranuleBytes, 3 * kGranuleBytes, 2 * kGranuleBytes,
                                 3 * kGranuleBytes};
  // Each step: a launch on the block named, or room for another allocation ('+' and pages).
  const std::vector<std::string> steps = {"a", "b", "c", "d", "a", "c", "+1", "b", "d",
                                          "a", "+2", "c", "b", "d", "a", "b", "c"};

  MovedPages prefetch_moves;
  FakeBudgets prefetch_budgets{kBudget, 64 * kBudget};
  FakeDevices devices;
  PrefetchPlacement prefetch(prefetch_budgets, devices, learned(TieredAdmission::kAlways));
  prefetch.set_events(&prefetch_moves);
  MovedPages remap_moves;
  FakeBudgets remap_budgets{kBudget, 64 * kBudget};
  tiers::FakeGranuleOps granule_ops;
  tiers::GranuleArena arena{granule_ops, tiers::ArenaOptions{}};
  OneArena arenas{arena};
  core::RemapWindow window;
  TieredPlacement remap(remap_budgets, arenas, window, learned());
  remap.set_events(&remap_moves);

  std::vector<CUdeviceptr> prefetch_blocks;
  std::vector<CUdeviceptr> remap_blocks;
  for (const uint64_t size : kSizes) {
    CUdeviceptr base = 0;
    ASSERT_EQ(prefetch.allocate(0, size, &base), CUDA_SUCCESS);
    prefetch_blocks.push_back(base);
    ASSERT_EQ(remap.allocate(0, size, &base).result, CUDA_SUCCESS);
    remap_blocks.push_back(base);
  }
  prefetch_moves.counting = true;
  remap_moves.counting = true;
  uint64_t sequence = 0;
  for (const std::string& step : steps) {
    if (step[0] == '+') {
      const uint64_t room = static_cast<uint64_t>(step[1] - '0') * kGranuleBytes;
      EXPECT_TRUE(prefetch.make_device_room(0, room)) << step;
      EXPECT_TRUE(remap.make_device_room(0, room)) << step;
      continue;
    }
    const auto block = static_cast<std::size_t>(step[0] - 'a');
    core::SubmissionUse use;
    use.sequence = ++sequence;
    use.stream = 1;
    use.blocks[use.count++] = prefetch_blocks[block];
    prefetch.before_submission(use);
    remap.before_launch(0, sequence, 1, std::vector<policies::BlockId>{remap_blocks[block]});
  }
  EXPECT_EQ(prefetch_moves.moves, remap_moves.moves);
  EXPECT_NE(std::ranges::find(remap_moves.moves, "evict d 1"), remap_moves.moves.end())
      << "no eviction in part to compare";
  for (std::size_t i = 0; i < prefetch_blocks.size(); ++i) {
    EXPECT_EQ(prefetch.device_bytes(prefetch_blocks[i]).value(),
              arena.block_containing(remap_blocks[i])->device_granules * kGranuleBytes)
        << "block " << i;
    EXPECT_EQ(prefetch.free(prefetch_blocks[i]), CUDA_SUCCESS);
    EXPECT_EQ(remap.free(0, remap_blocks[i]), CUDA_SUCCESS);
  }
}

}  // namespace
}  // namespace vramspill::placement
