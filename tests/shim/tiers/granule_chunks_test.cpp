// tiers/granule_chunks and the arena's chunked blocks (Note [Chunks]): where a large block's
// chunks and singles go, a map per chunk when it moves, moves of part of a chunked block rounded
// to whole chunks, pools that change size, chunks the driver refuses backed by singles, and
// allocations still all or nothing.
#include "tiers/granule_chunks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "arena_test_fixtures.h"
#include "tiers/granule_arena.h"
#include "tiers/granule_homes.h"

namespace vramspill::tiers {
namespace {

constexpr GranuleKind kDevice = GranuleKind::kDevice;
constexpr GranuleKind kHost = GranuleKind::kHost;

std::vector<uint32_t> sizes_of(const std::vector<PieceShape>& layout) {
  std::vector<uint32_t> sizes;
  for (const PieceShape& piece : layout) sizes.push_back(piece.granules);
  return sizes;
}

TEST(BlockLayout, ChunksAtTheBlocksChunkPositionsAndSinglesAtItsTail) {
  const std::vector<PieceShape> layout = block_layout(35, 35, ChunkSizes{});
  EXPECT_EQ(sizes_of(layout), (std::vector<uint32_t>{16, 16, 1, 1, 1}));
  for (const PieceShape& piece : layout) EXPECT_EQ(piece.kind, kDevice);
}

TEST(BlockLayout, BlocksBelowTheThresholdAreSingles) {
  EXPECT_EQ(block_layout(31, 31, ChunkSizes{}).size(), 31u);
  EXPECT_EQ(block_layout(32, 32, ChunkSizes{}).size(), 2u) << "64 MiB: two chunks";
  EXPECT_EQ(block_layout(32, 32, ChunkSizes{.chunk_granules = 1}).size(), 32u) << "no chunks";
}

TEST(BlockLayout, APositionTheDevicePartEndsInsideTakesSingles) {
  const std::vector<PieceShape> layout = block_layout(48, 20, ChunkSizes{});
  ASSERT_EQ(layout.size(), 1u + 16 + 1);
  EXPECT_EQ(layout[0].granules, 16u);
  EXPECT_EQ(layout[0].kind, kDevice);
  for (std::size_t i = 1; i <= 16; ++i) {
    EXPECT_EQ(layout[i].granules, 1u);
    EXPECT_EQ(layout[i].kind, i <= 4 ? kDevice : kHost) << i;
  }
  EXPECT_EQ(layout[17].granules, 16u);
  EXPECT_EQ(layout[17].kind, kHost);
}

// Note [Granule homes]: a chunk's home is one mapping inside one reserved range of homes; what a
// range has left when a chunk does not fit serves singles.
TEST(ChunkHomes, AChunkHomeIsOneMappingAndARangesLeftoverServesSingles) {
  FakeGranuleOps ops;
  std::vector<std::pair<CUdeviceptr, uint64_t>> settled;  // home, granules
  {
    GranuleHomes homes{ops};
    const auto settle = [&](uint64_t granules) {
      GranuleHandle handle = 0;
      EXPECT_EQ(ops.create(kDevice, granules, &handle), CUDA_SUCCESS);
      CUdeviceptr home = 0;
      EXPECT_EQ(homes.settle({.handle = handle, .granules = granules}, &home), CUDA_SUCCESS);
      settled.emplace_back(home, granules);
      return std::pair(home, handle);
    };
    for (int i = 0; i < 500; ++i) settle(1);  // of a range of 512
    const auto [chunk_home, chunk] = settle(16);
    EXPECT_EQ(ops.calls(Call::kReserve), 2) << "the chunk's home in a range of its own";
    EXPECT_EQ(ops.mapped_handle(chunk_home + 15 * kGranuleBytes), chunk);
    for (int i = 0; i < 12; ++i)
      EXPECT_LT(settle(1).first, chunk_home) << "the first range's last twelve homes";
    EXPECT_EQ(homes.settled(), 500u + 16 + 12);
    for (const auto& [home, granules] : settled) EXPECT_TRUE(homes.vacate(home, granules));
  }
  EXPECT_EQ(ops.reservations(), 0u);
  EXPECT_TRUE(ops.misuse().empty()) << ops.misuse().front();
}

// An arena with the default chunks: 32 MiB for blocks of 64 MiB and more.
class ChunkedArenaTest : public GranuleMoveTest {
 protected:
  uint64_t move_calls(std::vector<GranuleMove> moves) {
    const uint64_t before = arena_.stats().move_vmm_calls;
    move(std::move(moves));
    return arena_.stats().move_vmm_calls - before;
  }
  // The handles the block's first `granules` granules map, each once.
  std::vector<GranuleHandle> handles(CUdeviceptr base, uint64_t granules) {
    std::vector<GranuleHandle> found;
    for (uint64_t i = 0; i < granules; ++i) {
      const GranuleHandle handle = *ops_.mapped_handle(base + i * kGranuleBytes);
      if (found.empty() || found.back() != handle) found.push_back(handle);
    }
    return found;
  }
};

TEST_F(ChunkedArenaTest, ABlockOf64MiBIsTwoChunksMappedWithTwoCalls) {
  const CUdeviceptr base = tagged_block(32, 32);
  EXPECT_EQ(ops_.live_chunks(kDevice), 2u);
  EXPECT_EQ(ops_.live_handles(), 2u);
  EXPECT_EQ(ops_.handle_maps(), 2);
  EXPECT_EQ(arena_.stats().device_granules, 32u) << "the books count granules";
  EXPECT_EQ(arena_.stats().created_granules, 32u);
  expect_tags(base, 32);
}

TEST_F(ChunkedArenaTest, AWholeBlockMovesWithAMapPerChunk) {
  const CUdeviceptr base = tagged_block(32, 32);
  move({{.base = base, .to = kHost, .granules = 0}});  // homes made
  move({{.base = base, .to = kDevice, .granules = 0}});
  const int copies = ops_.calls(Call::kCopy);
  EXPECT_EQ(move_calls({{.base = base, .to = kHost, .granules = 0}}), 1u + 2 + 1)
      << "one unmap, a map per chunk and one access, where singles took 1 + 32 + 1";
  EXPECT_EQ(ops_.calls(Call::kCopy) - copies, 1) << "the chunks' homes follow each other";
  EXPECT_EQ(kinds(base, 32), std::vector<GranuleKind>(32, kHost));
  EXPECT_EQ(arena_.stats().homes, 64u) << "two chunks of each kind, homed in granules";
  expect_tags(base, 32);
}

TEST_F(ChunkedArenaTest, AnEvictionOfPartTakesTheSinglesThenWholeChunks) {
  const CUdeviceptr base = tagged_block(40, 40);  // two chunks and eight singles
  EXPECT_EQ(arena_.eviction_granules(base, 4), 4u);
  EXPECT_EQ(arena_.eviction_granules(base, 10), 24u) << "rounded up to the chunk";
  const MoveOutcome outcome = move({{.base = base, .to = kHost, .granules = 10}});
  EXPECT_EQ(outcome.to_host, 24u) << "what really moved";
  EXPECT_EQ(arena_.block_containing(base)->device_granules, 16u);
  EXPECT_EQ(kinds(base, 40)[15], kDevice);
  EXPECT_EQ(kinds(base, 40)[16], kHost);
  expect_tags(base, 40);
}

TEST_F(ChunkedArenaTest, APromotionOfPartRoundsDownToWholeChunks) {
  const CUdeviceptr base = tagged_block(32, 0);
  EXPECT_EQ(move({{.base = base, .to = kDevice, .granules = 10}}).to_device, 0u)
      << "never more on the device than asked";
  EXPECT_EQ(move({{.base = base, .to = kDevice, .granules = 20}}).to_device, 16u);
  EXPECT_EQ(kinds(base, 32)[15], kDevice);
  EXPECT_EQ(kinds(base, 32)[16], kHost);
  expect_tags(base, 32);
}

TEST_F(ChunkedArenaTest, APoolOfChunksGivesOneBackForSingles) {
  ASSERT_TRUE(arena_.free(allocate(64 * kMiB, 32)));
  EXPECT_EQ(arena_.stats().pooled_device_granules, 32u);
  allocate(8 * kMiB, 4);
  EXPECT_EQ(ops_.live_chunks(kDevice), 1u) << "one chunk released for four singles";
  EXPECT_EQ(arena_.stats().released_granules, 16u);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 16u);
}

TEST_F(ChunkedArenaTest, APoolOfSinglesGivesThemBackForAChunk) {
  ASSERT_TRUE(arena_.free(allocate(32 * kMiB, 16)));  // sixteen singles
  ASSERT_EQ(ops_.live_chunks(kDevice), 0u);
  allocate(64 * kMiB, 32);
  EXPECT_EQ(ops_.live_chunks(kDevice), 2u);
  EXPECT_EQ(ops_.live_handles(), 2u) << "the singles went back to the driver";
  EXPECT_EQ(arena_.stats().released_granules, 16u);
}

TEST_F(ChunkedArenaTest, ChunksTheDriverRefusesAreSingles) {
  ops_.fail_chunks(true);
  const CUdeviceptr base = tagged_block(32, 32);
  EXPECT_EQ(ops_.live_handles(), 32u);
  EXPECT_EQ(ops_.live_chunks(kDevice), 0u);
  expect_tags(base, 32);
}

TEST_F(ChunkedArenaTest, AChunkMovesToSinglesWhenTheDriverRefusesAChunk) {
  const CUdeviceptr base = tagged_block(32, 32);
  ops_.fail_chunks(true);
  const MoveOutcome outcome = move({{.base = base, .to = kHost, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_host, 32u);
  EXPECT_EQ(handles(base, 32).size(), 32u) << "the block maps singles on the host";
  ops_.fail_chunks(false);
  move({{.base = base, .to = kDevice, .granules = 0}});
  EXPECT_EQ(kinds(base, 32), std::vector<GranuleKind>(32, kDevice));
  expect_tags(base, 32);
}

TEST_F(ChunkedArenaTest, AChunkedAllocationIsAllOrNothing) {
  ops_.fail(Call::kMap, 1);
  CUdeviceptr base = 0;
  EXPECT_EQ(arena_.allocate(64 * kMiB, 20, &base), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ops_.mappings(), 0u);
  EXPECT_EQ(ops_.reservations(), 0u);
  EXPECT_EQ(arena_.stats().blocks, 0u);
  EXPECT_EQ(arena_.stats().pooled_device_granules + arena_.stats().pooled_host_granules, 32u)
      << "what it made waits in the pools";
}

TEST_F(ChunkedArenaTest, AnUnmapTheDriverRefusesLeaksWholeChunks) {
  const CUdeviceptr base = allocate(64 * kMiB, 32);
  ops_.fail(Call::kUnmap, 1);  // the range's unmap; the first chunk's, one by one, succeeds
  ops_.fail(Call::kUnmap, 3);  // the second chunk's
  ASSERT_TRUE(arena_.free(base));
  EXPECT_EQ(arena_.stats().leaked_granules, 16u);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 16u);
}

// Note [Moves copied on the stream]: a chunk a copy in flight may still read goes back to the
// driver, for the singles a later move needs, only once that copy is over.
TEST_F(ChunkedArenaTest, APooledChunkACopyMayReadIsReleasedAfterTheCopy) {
  const CUdeviceptr big = tagged_block(32, 32);
  const CUdeviceptr small = tagged_block(2, 0);
  FakeQueuedWork queued;
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const std::vector<GranuleMove> evict{{.base = big, .to = kHost, .granules = 0}};
    EXPECT_EQ(arena_.move_on_stream(evict, exclusive, queued).on_stream, 32u);
  }
  ASSERT_GT(ops_.copies_in_flight(), 0u) << "the device chunks are pooled under their copy";
  move({{.base = small, .to = kDevice, .granules = 0}});
  EXPECT_EQ(ops_.live_chunks(kDevice), 1u) << "one chunk went back for the two singles";
  EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  expect_tags(big, 32);
  expect_tags(small, 2);
}

// ... but where the pools hold settled chunks enough for the singles wanted, those go back and
// the copy in flight is not waited for.
TEST_F(ChunkedArenaTest, SettledChunksGoBackForSinglesWithoutWaitingForACopy) {
  const CUdeviceptr big = tagged_block(32, 32);
  const CUdeviceptr small = tagged_block(2, 0);
  const CUdeviceptr freed = tagged_block(32, 32);
  ASSERT_TRUE(arena_.free(freed));  // its chunks pooled, settled: no copy uses them
  FakeQueuedWork queued;
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const std::vector<GranuleMove> evict{{.base = big, .to = kHost, .granules = 0}};
    EXPECT_EQ(arena_.move_on_stream(evict, exclusive, queued).on_stream, 32u);
  }
  ASSERT_GT(ops_.copies_in_flight(), 0u) << "big's chunk is pooled under its copy";
  const std::size_t before = ops_.sequence().size();
  move({{.base = small, .to = kDevice, .granules = 0}});
  const std::vector<Call> moved(ops_.sequence().begin() + static_cast<std::ptrdiff_t>(before),
                                ops_.sequence().end());
  const auto released = std::ranges::find(moved, Call::kRelease);
  ASSERT_NE(released, moved.end()) << "no chunk went back for the singles";
  EXPECT_EQ(std::find(moved.begin(), released, Call::kWait), released)
      << "the copy in flight was waited for though settled chunks would do";
  EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  expect_tags(big, 32);
  expect_tags(small, 2);
}

// Note [Staged promotions]: a stage takes its granules, waiting on the host for the arena's stream
// where a pooled chunk a copy may read must go back for singles, before it orders that stream
// after the program's work: the host never waits for the program's kernels in the window.
TEST_F(ChunkedArenaTest, AStageTakesItsGranulesBeforeItsStreamWaitsForTheProgram) {
  const CUdeviceptr big = tagged_block(32, 32);
  const CUdeviceptr small = tagged_block(2, 0);
  FakeQueuedWork queued;
  queued.program_events = {0x9e};
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const std::vector<GranuleMove> evict{{.base = big, .to = kHost, .granules = 0}};
    ASSERT_EQ(arena_.move_on_stream(evict, exclusive, queued).on_stream, 32u);
  }
  const std::size_t before = ops_.sequence().size();
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const GranuleMove promotion{.base = small, .to = kDevice, .granules = 0};
    EXPECT_EQ(arena_.stage(std::span(&promotion, 1), exclusive, queued).to_device, 2u);
  }
  const std::vector<Call> staged(ops_.sequence().begin() + static_cast<std::ptrdiff_t>(before),
                                 ops_.sequence().end());
  const auto ordered = std::ranges::find(staged, Call::kQueueAfter);
  ASSERT_NE(ordered, staged.end());
  EXPECT_NE(std::find(staged.begin(), ordered, Call::kWait), ordered)
      << "the chunk's copy waited for, so that it goes back for the singles";
  EXPECT_EQ(std::find(ordered, staged.end(), Call::kWait), staged.end())
      << "no host wait once the stream waits for the program";
  EXPECT_EQ(ops_.live_chunks(kDevice), 1u);
}

TEST_F(ChunkedArenaTest, GivingBackTakesAWholeChunkWhereItMust) {
  ASSERT_TRUE(arena_.free(allocate(64 * kMiB, 32)));
  arena_.give_back_device_granules(4);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 16u) << "a chunk, for four granules";
  arena_.trim();
  EXPECT_EQ(arena_.stats().pooled_device_granules, 16u)
      << "a trim to two granules keeps the chunk it cannot split";
}

// give_back_device_granules() keeps every pooled host granule ("keep all" is UINT64_MAX
// granules, which must not wrap around).
TEST_F(ChunkedArenaTest, GivingBackDeviceGranulesKeepsThePooledHostOnes) {
  ASSERT_TRUE(arena_.free(allocate(4 * 2 * kMiB, 0)));
  ASSERT_EQ(arena_.stats().pooled_host_granules, 4u);
  arena_.give_back_device_granules(1);
  EXPECT_EQ(arena_.stats().pooled_host_granules, 4u);
}

// Long runs of chunks keep the books and the bytes whichever driver call fails, and where, in a
// move either way.
TEST_F(ChunkedArenaTest, LongRunsOfChunksSurviveEachFailedCall) {
  for (const Call call : {Call::kMap, Call::kUnmap, Call::kCopy, Call::kCreate}) {
    for (int nth = 1; nth <= 6; ++nth) {
      const CUdeviceptr base = tagged_block(200, 200);
      ops_.fail(call, nth);
      (void)move({{.base = base, .to = kHost, .granules = 0}});
      ops_.fail(call, 0);
      std::string problem;
      ASSERT_TRUE(arena_.check_invariants(&problem)) << call << "/" << nth << ": " << problem;
      EXPECT_EQ(arena_.stats().unbacked_granules, 0u) << call << "/" << nth;
      expect_tags(base, 200);
      (void)move({{.base = base, .to = kDevice, .granules = 0}});
      ASSERT_TRUE(arena_.check_invariants(&problem)) << call << "/" << nth << ": " << problem;
      expect_tags(base, 200);
      ASSERT_TRUE(arena_.free(base));
      ASSERT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
    }
  }
}

}  // namespace
}  // namespace vramspill::tiers
