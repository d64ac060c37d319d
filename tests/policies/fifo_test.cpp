#include "policies/fifo.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "policies/lru.h"

namespace vramspill::policies {
namespace {

using Blocks = std::vector<BlockId>;

FifoPolicy make_fifo(uint64_t capacity) { return FifoPolicy({capacity, InvariantMode::kAbort}); }

TEST(FifoTest, EvictsInArrivalOrderWhateverTheUse) {
  FifoPolicy fifo = make_fifo(8);
  LruPolicy lru({8, InvariantMode::kAbort});
  for (EvictionPolicy* policy : std::array<EvictionPolicy*, 2>{&fifo, &lru}) {
    for (BlockId block = 1; block <= 3; ++block) policy->allocated(block, 1, true);
    for (uint64_t sequence = 1; sequence <= 10; ++sequence) policy->used(sequence, 0, Blocks{1});
  }
  // Block 1 is the hottest and still the first out: it came first.
  EXPECT_EQ(fifo.choose_victims(2, Blocks{}).blocks, (Blocks{1, 2}));
  EXPECT_EQ(lru.choose_victims(2, Blocks{}).blocks, (Blocks{2, 3}));
  EXPECT_EQ(fifo.choose_victims(1, Blocks{1}).blocks, Blocks{2});
}

TEST(FifoTest, ABlockBroughtBackArrivesAnew) {
  FifoPolicy fifo = make_fifo(8);
  for (BlockId block = 1; block <= 3; ++block) fifo.allocated(block, 2, true);
  fifo.allocated(4, 2, false);  // on the host: not in the queue until it arrives
  EXPECT_EQ(fifo.choose_victims(6, Blocks{}).blocks, (Blocks{1, 2, 3}));
  fifo.moved(1, 0);
  fifo.moved(4, 2);
  fifo.moved(1, 2);
  EXPECT_EQ(fifo.choose_victims(8, Blocks{}).blocks, (Blocks{2, 3, 4, 1}));
  // A partial move keeps the block's place.
  fifo.moved(2, 1);
  fifo.moved(2, 2);
  EXPECT_EQ(fifo.choose_victims(1, Blocks{}).blocks, Blocks{2});
}

TEST(FifoTest, PromotesEveryBlockThatFitsTheBudget) {
  FifoPolicy fifo = make_fifo(4);
  fifo.allocated(1, 4, false);
  fifo.allocated(2, 5, false);
  EXPECT_TRUE(fifo.should_promote(1));
  EXPECT_FALSE(fifo.should_promote(2));
}

}  // namespace
}  // namespace vramspill::policies
