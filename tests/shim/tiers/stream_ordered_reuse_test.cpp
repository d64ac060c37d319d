// tiers::StreamOrderedReuse (Note [Reuse in stream order]): a freed block serves its own stream
// at once and others only once its stream reached the free; sizes, devices and the bound apart.
#include "tiers/stream_ordered_reuse.h"

#include <gtest/gtest.h>

namespace vramspill::tiers {
namespace {

constexpr uint64_t kStreamA = 0xA0;
constexpr uint64_t kStreamB = 0xB0;
constexpr uint64_t kNoLimit = 1000;

TEST(StreamOrderedReuse, AFreedBlockServesItsOwnStreamAtOnce) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  ASSERT_NE(reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit), 0u);
  EXPECT_EQ(reuse.take(0, 4, kStreamA).value().base, 0x1000u);
  EXPECT_EQ(reuse.take(0, 4, kStreamA), std::nullopt) << "taken once";
  EXPECT_EQ(reuse.stats().same_stream, 1u);
  EXPECT_EQ(reuse.stats().kept_granules, 0u);
}

TEST(StreamOrderedReuse, AnotherStreamWaitsUntilTheFreeIsReached) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  const uint64_t ticket = reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit);
  ASSERT_NE(ticket, 0u);
  EXPECT_EQ(reuse.take(0, 4, kStreamB), std::nullopt);
  reuse.reached(ticket);
  const std::optional<StreamOrderedReuse::Taken> taken = reuse.take(0, 4, kStreamB);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->base, 0x1000u);
  EXPECT_TRUE(taken->reached);
  EXPECT_EQ(reuse.stats().other_stream, 1u);
}

// Note [Moves of dead contents]: only a kept block whose free was reached is dead; taken again,
// it is the program's.
TEST(StreamOrderedReuse, AKeptBlockIsDeadOnceItsFreeIsReachedUntilTaken) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  EXPECT_FALSE(reuse.dead(0x1000)) << "live";
  const uint64_t ticket = reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit);
  EXPECT_FALSE(reuse.dead(0x1000)) << "work before the free may still use it";
  reuse.reached(ticket);
  EXPECT_TRUE(reuse.dead(0x1000));
  ASSERT_TRUE(reuse.take(0, 4, kStreamA).has_value());
  EXPECT_FALSE(reuse.dead(0x1000));
}

TEST(StreamOrderedReuse, ABlockTakenBeforeItsFreeIsReachedSaysSo) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  ASSERT_NE(reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit), 0u);
  const std::optional<StreamOrderedReuse::Taken> taken = reuse.take(0, 4, kStreamA);
  ASSERT_TRUE(taken.has_value());
  EXPECT_FALSE(taken->reached);
  EXPECT_TRUE(taken->same_stream);
  reuse.give_up_taken(*taken);
  EXPECT_EQ(reuse.stats().given_up, 1u);
  EXPECT_EQ(reuse.stats().same_stream, 0u) << "given up, not served";
  EXPECT_EQ(reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit), 0u) << "no longer one of these";
}

TEST(StreamOrderedReuse, OnlyTheSameDeviceAndGranuleCountFit) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  ASSERT_NE(reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit), 0u);
  EXPECT_EQ(reuse.take(0, 3, kStreamA), std::nullopt);
  EXPECT_EQ(reuse.take(0, 5, kStreamA), std::nullopt);
  EXPECT_EQ(reuse.take(1, 4, kStreamA), std::nullopt);
  EXPECT_EQ(reuse.take(0, 4, kStreamA).value().base, 0x1000u);
}

TEST(StreamOrderedReuse, TheOldestFittingBlockComesBackFirst) {
  StreamOrderedReuse reuse;
  for (const uint64_t base : {0x1000u, 0x2000u, 0x3000u}) {
    ASSERT_TRUE(reuse.made(base));
    ASSERT_NE(reuse.keep(0, base, 2, kStreamA, kNoLimit), 0u);
  }
  EXPECT_EQ(reuse.take(0, 2, kStreamA).value().base, 0x1000u);
  EXPECT_EQ(reuse.take(0, 2, kStreamA).value().base, 0x2000u);
  EXPECT_EQ(reuse.take(0, 2, kStreamA).value().base, 0x3000u);
}

TEST(StreamOrderedReuse, OnlyBlocksARequestMadeAreKept) {
  StreamOrderedReuse reuse;
  EXPECT_EQ(reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit), 0u) << "never made";
  ASSERT_TRUE(reuse.made(0x2000));
  reuse.forgotten(0x2000);  // freed with cuMemFree
  EXPECT_EQ(reuse.keep(0, 0x2000, 4, kStreamA, kNoLimit), 0u);
  // A block taken back is live again and may be kept again.
  ASSERT_TRUE(reuse.made(0x3000));
  ASSERT_NE(reuse.keep(0, 0x3000, 4, kStreamA, kNoLimit), 0u);
  ASSERT_EQ(reuse.take(0, 4, kStreamA).value().base, 0x3000u);
  EXPECT_NE(reuse.keep(0, 0x3000, 4, kStreamA, kNoLimit), 0u);
}

TEST(StreamOrderedReuse, ADeviceKeepsNoMoreThanItsLimit) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  ASSERT_TRUE(reuse.made(0x2000));
  ASSERT_TRUE(reuse.made(0x3000));
  ASSERT_NE(reuse.keep(0, 0x1000, 6, kStreamA, 10), 0u);
  EXPECT_EQ(reuse.keep(0, 0x2000, 6, kStreamA, 10), 0u) << "12 granules past a limit of 10";
  EXPECT_NE(reuse.keep(1, 0x3000, 6, kStreamA, 10), 0u) << "another device's own limit";
  EXPECT_EQ(reuse.keep(0, 0x2000, 4, kStreamA, 10), 0u) << "refused once: no longer live";
  EXPECT_EQ(reuse.stats().kept_granules, 12u);
}

TEST(StreamOrderedReuse, TheOldestReachedBlocksComeFirstAcrossSizes) {
  StreamOrderedReuse reuse;
  uint64_t tickets[4] = {};
  const uint64_t granules[4] = {2, 4, 2, 8};
  for (int i = 0; i < 4; ++i) {
    const uint64_t base = 0x1000u * static_cast<uint64_t>(i + 1);
    ASSERT_TRUE(reuse.made(base));
    tickets[i] = reuse.keep(0, base, granules[i], kStreamA, kNoLimit);
    ASSERT_NE(tickets[i], 0u);
  }
  reuse.reached(tickets[1]);
  reuse.reached(tickets[2]);
  reuse.reached(tickets[3]);
  // The first block is not reached: never named, however many granules are asked for.
  const std::vector<StreamOrderedReuse::Block> first = reuse.oldest_reached(0, 5);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].base, 0x2000u);
  EXPECT_EQ(first[1].base, 0x3000u);
  EXPECT_EQ(reuse.stats().given_up, 0u) << "still kept until given up";
  for (const StreamOrderedReuse::Block& block : first)
    EXPECT_TRUE(reuse.give_up_if_reached(block.base));
  const std::vector<StreamOrderedReuse::Block> rest = reuse.oldest_reached(0, 100);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].base, 0x4000u);
  EXPECT_EQ(rest[0].granules, 8u);
  EXPECT_TRUE(reuse.give_up_if_reached(rest[0].base));
  EXPECT_EQ(reuse.stats().given_up, 3u);
  EXPECT_EQ(reuse.stats().kept_granules, 2u);
  EXPECT_EQ(reuse.take(0, 2, kStreamA).value().base, 0x1000u);
}

// A stream found idle has run past every free on it: its blocks serve other streams and are dead.
TEST(StreamOrderedReuse, AnIdleStreamHasReachedItsFrees) {
  StreamOrderedReuse reuse;
  for (const uint64_t base : {0x1000u, 0x2000u}) {
    ASSERT_TRUE(reuse.made(base));
    ASSERT_NE(reuse.keep(0, base, 4, base == 0x1000u ? kStreamA : kStreamB, kNoLimit), 0u);
  }
  const StreamOrderedReuse::Unreached unreached = reuse.unreached_streams(0, 8);
  EXPECT_EQ(unreached.streams, (std::vector<uint64_t>{kStreamA, kStreamB}));
  EXPECT_EQ(reuse.unreached_streams(0, 1).streams.size(), 1u);
  EXPECT_TRUE(reuse.unreached_streams(1, 8).streams.empty());
  reuse.stream_idle(kStreamA, unreached.later_tickets);
  EXPECT_TRUE(reuse.dead(0x1000));
  EXPECT_FALSE(reuse.dead(0x2000));
  EXPECT_EQ(reuse.unreached_streams(0, 8).streams, (std::vector<uint64_t>{kStreamB}));
  EXPECT_EQ(reuse.take(0, 4, 0xC0).value().base, 0x1000u);
}

// A stream found idle has run what was queued before it was asked: a free kept on it between the
// question and the answer (another thread's launch and free) is not reached by that answer.
TEST(StreamOrderedReuse, AFreeKeptAfterTheQuestionIsNotReachedByItsAnswer) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  ASSERT_TRUE(reuse.made(0x2000));
  ASSERT_NE(reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit), 0u);
  const StreamOrderedReuse::Unreached unreached = reuse.unreached_streams(0, 8);
  ASSERT_NE(reuse.keep(0, 0x2000, 4, kStreamA, kNoLimit), 0u);  // meanwhile
  reuse.stream_idle(kStreamA, unreached.later_tickets);
  EXPECT_TRUE(reuse.dead(0x1000));
  EXPECT_FALSE(reuse.dead(0x2000)) << "its stream may still run the work before its free";
  EXPECT_EQ(reuse.unreached_streams(0, 8).streams, (std::vector<uint64_t>{kStreamA}));
}

TEST(StreamOrderedReuse, AnEndedStreamsBlocksWaitForTheirFrees) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  const uint64_t ticket = reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit);
  EXPECT_EQ(reuse.stream_ended(kStreamA), std::vector<uint64_t>{ticket})
      << "for a last host function on the stream to reach";
  // A new stream may get the ended one's handle: it is not the same stream.
  EXPECT_EQ(reuse.take(0, 4, kStreamA), std::nullopt);
  reuse.reached(ticket);
  EXPECT_EQ(reuse.take(0, 4, kStreamA).value().base, 0x1000u);
}

TEST(StreamOrderedReuse, AWithdrawnBlockIsNoLongerKept) {
  StreamOrderedReuse reuse;
  ASSERT_TRUE(reuse.made(0x1000));
  const uint64_t ticket = reuse.keep(0, 0x1000, 4, kStreamA, kNoLimit);
  const std::optional<StreamOrderedReuse::Block> withdrawn = reuse.withdraw(ticket);
  ASSERT_TRUE(withdrawn.has_value());
  EXPECT_EQ(withdrawn->base, 0x1000u);
  EXPECT_EQ(reuse.withdraw(ticket), std::nullopt);
  reuse.reached(ticket);  // the host function that was never queued: harmless
  EXPECT_EQ(reuse.take(0, 4, kStreamA), std::nullopt);
  EXPECT_EQ(reuse.stats().kept_granules, 0u);
}

}  // namespace
}  // namespace vramspill::tiers
