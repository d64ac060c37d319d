// placement/stream_ordered_blocks over tiered blocks on fake VMM calls, the shim's own budgets
// and a fake driver for streams: which kept block serves a stream-ordered request (Note [Reuse in
// stream order]), when kept blocks go back to the arena, and which frees are kept (Note
// [Stream-ordered requests in the arena]).
#include "placement/stream_ordered_blocks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "placement/prefetch_placement.h"
#include "placement_fakes.h"
#include "pool_fakes.h"
#include "tiered_on_fake_vmm.h"

namespace vramspill::placement {
namespace {

using tiers::kGranuleBytes;

CUstream fake_stream(std::uintptr_t id) { return reinterpret_cast<CUstream>(id << 4); }

// Streams as the test runs them: host functions run when the test says a stream got there.
class FakeStreams final : public StreamOrderSeam {
 public:
  bool queueing = true;  // false: cuLaunchHostFunc fails
  bool waiting = true;   // false: cuStreamSynchronize fails
  uint64_t context = 0x1000;  // the calling thread's context
  std::set<CUstream> idle_streams;
  std::vector<CUstream> asked;
  std::vector<CUstream> waited_for;
  // Runs inside the next idle(), as another thread may between the question and the answer.
  std::function<void()> while_asked;

  bool queue_host_function(CUstream stream, CUhostFn run, void* data) noexcept override {
    if (!queueing) return false;
    queued_.emplace_back(stream, run, data);
    return true;
  }
  bool idle(CUstream stream) noexcept override {
    asked.push_back(stream);
    if (while_asked) std::exchange(while_asked, nullptr)();  // once
    return idle_streams.contains(stream);
  }
  bool wait_for(CUstream stream) noexcept override {
    waited_for.push_back(stream);
    return waiting;
  }
  uint64_t current_context() noexcept override { return context; }

  // `stream` runs the host functions queued on it.
  void reach(CUstream stream) {
    std::erase_if(queued_, [stream](const Queued& queued) {
      if (std::get<0>(queued) != stream) return false;
      std::get<1>(queued)(std::get<2>(queued));
      return true;
    });
  }
  ~FakeStreams() {
    for (const auto& [stream, run, data] : queued_) run(data);
  }

 private:
  using Queued = std::tuple<CUstream, CUhostFn, void*>;
  std::vector<Queued> queued_;
};

// The budgets as they are, or a device room the test says.
class RoomSays final : public TieredBudgets {
 public:
  explicit RoomSays(TieredBudgets& real) : real_(real) {}
  std::optional<uint64_t> room;

  uint64_t device_room(int device) noexcept override {
    return room ? *room : real_.device_room(device);
  }
  bool take_device(int device, uint64_t bytes) noexcept override {
    return real_.take_device(device, bytes);
  }
  void give_device(int device, uint64_t bytes) noexcept override {
    real_.give_device(device, bytes);
  }
  bool take_host(uint64_t bytes) noexcept override { return real_.take_host(bytes); }
  void give_host(uint64_t bytes) noexcept override { real_.give_host(bytes); }

 private:
  TieredBudgets& real_;
};

// The driver's managed memory as the prefetch mover sees it on device 0: blocks at made-up
// addresses, and each prefetch and free remembered, with whether a capture could have begun
// meanwhile (another thread's try at `gate`).
class FakeManaged final : public tiers::PrefetchOps {
 public:
  explicit FakeManaged(std::shared_mutex& gate) : gate_(gate) {}
  std::map<CUdeviceptr, uint64_t> sizes;  // every allocation made, freed or not
  std::vector<CUdeviceptr> released;
  std::vector<CUdeviceptr> to_device;
  std::vector<CUdeviceptr> to_host;
  // For each allocation and free, in order: whether captures were held off.
  std::vector<bool> captures_held_off;

  CUresult allocate(uint64_t bytes, CUdeviceptr* base) noexcept override {
    captures_held_off.push_back(gate_held());
    *base = next_;
    next_ += bytes + kGranuleBytes;
    sizes[*base] = bytes;
    return CUDA_SUCCESS;
  }
  CUresult release(CUdeviceptr base) noexcept override {
    captures_held_off.push_back(gate_held());
    released.push_back(base);
    return CUDA_SUCCESS;
  }
  CUresult prefetch(CUdeviceptr base, uint64_t, uint64_t, bool device, std::span<const uint64_t>,
                    bool) noexcept override {
    (device ? to_device : to_host).push_back(base);
    return CUDA_SUCCESS;
  }
  CUresult order_stream_after_prefetches(uint64_t) noexcept override { return CUDA_SUCCESS; }
  bool promotions_done() noexcept override { return true; }
  CUresult wait_for_prefetches() noexcept override { return CUDA_SUCCESS; }
  std::optional<uint64_t> device_free() noexcept override { return std::nullopt; }
  void forget_context() noexcept override {}

 private:
  // Whether a capture's cuStreamBeginCapture would wait: another thread cannot take the gate.
  bool gate_held() {
    bool free = false;
    std::thread([&] {
      free = gate_.try_lock();
      if (free) gate_.unlock();
    }).join();
    return !free;
  }

  std::shared_mutex& gate_;
  CUdeviceptr next_ = uint64_t{1} << 40;
};

// Device 0 served by the prefetch mover.
class ManagedDevice final : public PrefetchDevices {
  std::shared_mutex gate_;  // before `managed`, which waits on it

 public:
  FakeManaged managed{gate_};
  bool serves = true;  // false: as without concurrent managed access
  tiers::PrefetchOps* ops(int device) noexcept override {
    return device == 0 && serves ? &managed : nullptr;
  }
  std::shared_lock<std::shared_mutex> hold_if_may_move() noexcept override {
    if (moves && answers_before_capture && (*answers_before_capture)-- == 0) moves = false;
    std::shared_lock held(gate_);
    if (!moves) held.unlock();
    return held;
  }
  bool moves = true;  // false: as while a stream capture is in progress
  // A capture begins once hold_if_may_move() has said yes this many more times: a capture
  // another thread begins right after a test.
  std::optional<int> answers_before_capture;
};

// Rules by size alone never ask for a stack.
class NoCallSites final : public CallSites {
 public:
  bool capture(CallStack& /*stack*/, std::string_view& why) noexcept override {
    why = "not in these tests";
    return false;
  }
};

const CUstream kOne = fake_stream(1);
const CUstream kTwo = fake_stream(2);

class StreamOrderedBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.spill.mode = SpillMode::kTiered;
    config_.tiered.min_size = kGranuleBytes;
    queries_.devices = 1;
    queries_.default_pools[0] = fake_pool(1);
  }
  void TearDown() override { tiered_.expect_consistent_arena(); }

  // Stream-ordered blocks whose tiered blocks fall under `rules`.
  void make(std::vector<TieredRule> rules = {}) {
    config_.tiered.rules = std::move(rules);
    rules_.emplace(config_.tiered.rules);
    tiered_blocks_.emplace(config_, ledger_, tiered_.use, tiered_.host_budget, tiered_.placement,
                           prefetch_, *rules_, call_sites_);
    blocks_.emplace(config_, ledger_, room_, *tiered_blocks_, pools_, reuse_, streams_);
    prefetch_.set_dead_blocks(&*blocks_);
  }
  // A request of `granules` on `stream` from `pool`: its block, or 0 when it was not served as
  // a tiered block.
  CUdeviceptr allocate(uint64_t granules, CUstream stream, CUmemoryPool pool = fake_pool(1)) {
    if (!blocks_) make();
    CUdeviceptr base = 0;
    const std::optional<CUresult> result =
        blocks_->allocate(0, pool, granules * kGranuleBytes, stream, &base);
    return result == CUDA_SUCCESS ? base : 0;
  }
  // cuMemFreeAsync of `base` on `stream`, as the admission flow hands it over: whether it is kept.
  bool free(CUdeviceptr base, CUstream stream) {
    const std::optional<core::Allocation> block = ledger_.on_freed(base);
    EXPECT_TRUE(block.has_value());
    return block && blocks_->keep(*block, stream);
  }
  uint64_t arena_blocks() const { return arena_.stats().blocks; }
  // Whether the prefetch mover's books have any of the block at `base` on the device.
  std::optional<bool> on_device(CUdeviceptr base) const {
    const std::optional<uint64_t> bytes = prefetch_.device_bytes(base);
    if (!bytes) return std::nullopt;
    return *bytes != 0;
  }
  // A block is kept on kOne, and a request on kTwo asks about kOne; meanwhile another thread runs
  // `end`, which must not return before the question is answered.
  void expect_an_end_to_wait_for_the_question(const std::function<void()>& end) {
    const CUdeviceptr block = allocate(2, kOne);
    ASSERT_TRUE(free(block, kOne));
    std::atomic<bool> ended{false};
    std::thread ending;
    bool ended_during_the_question = true;
    streams_.while_asked = [&] {
      ending = std::thread([&] {
        end();
        ended = true;
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ended_during_the_question = ended;
    };
    (void)allocate(2, kTwo);
    ending.join();
    EXPECT_EQ(streams_.asked, std::vector<CUstream>{kOne});
    EXPECT_FALSE(ended_during_the_question);
    EXPECT_TRUE(ended);
  }
  // Stream-ordered blocks with the prefetch mover, under `rules`.
  void make_prefetched(std::vector<TieredRule> rules = {}) {
    config_.tiered.mover = TieredMover::kPrefetch;
    make(std::move(rules));
  }

  LogCapture log_;
  Config config_;
  TieredOnFakeVmm tiered_;
  core::Ledger& ledger_ = tiered_.ledger;
  tiers::GranuleArena& arena_ = tiered_.arena;
  RoomSays room_{tiered_.budgets};
  NoCallSites call_sites_;
  FakePoolQueries queries_;
  PoolBooks pools_{queries_};
  // With [tiered] mover = "prefetch" it serves the blocks; with the remap mover it holds none.
  ManagedDevice managed_device_;
  PrefetchPlacement prefetch_{
      tiered_.budgets,
      managed_device_,
      {.policy = "lru", .invariant_mode = policies::InvariantMode::kAbort}};
  FakeManaged& managed_ = managed_device_.managed;
  tiers::StreamOrderedReuse reuse_;
  FakeStreams streams_;  // after reuse_: the host functions it runs at its end reach into it
  std::optional<TieredRules> rules_;
  std::optional<TieredBlocks> tiered_blocks_;
  std::optional<StreamOrderedBlocks> blocks_;
};

// prefer_host for blocks of `granules` granules.
TieredRule on_host_at(uint64_t granules) {
  TieredRule to_host;
  to_host.action = RuleAction::kPreferHost;
  to_host.min_size = granules * kGranuleBytes;
  to_host.max_size = granules * kGranuleBytes;
  to_host.place = "job.toml:1:1";
  return to_host;
}

TEST_F(StreamOrderedBlocksTest, ItsOwnStreamTakesAFreedBlockAtOnce) {
  const CUdeviceptr block = allocate(2, kOne);
  ASSERT_NE(block, 0u);
  ASSERT_TRUE(free(block, kOne));
  EXPECT_EQ(allocate(2, kOne), block) << "work queued after the free runs after it";
  EXPECT_EQ(reuse_.stats().same_stream, 1u);
  EXPECT_EQ(reuse_.stats().made, 1u);
  EXPECT_EQ(recorded(ledger_, core::Route::kTiered).live_count, 1u) << "the ledger has it again";
  EXPECT_EQ(arena_blocks(), 1u);
}

TEST_F(StreamOrderedBlocksTest, AnotherStreamTakesAFreedBlockOnlyOnceItsStreamReachedTheFree) {
  const CUdeviceptr block = allocate(2, kOne);
  ASSERT_TRUE(free(block, kOne));
  const CUdeviceptr other = allocate(2, kTwo);
  EXPECT_NE(other, block) << "kOne may still be using it";
  EXPECT_NE(other, 0u);
  streams_.reach(kOne);
  EXPECT_EQ(allocate(2, kTwo), block);
  EXPECT_EQ(reuse_.stats().other_stream, 1u);
}

TEST_F(StreamOrderedBlocksTest, AnEndedStreamsBlockWaitsForItsFreeWhateverStreamAsks) {
  const CUdeviceptr block = allocate(2, kOne);
  ASSERT_TRUE(free(block, kOne));
  blocks_->stream_ended(kOne);
  EXPECT_NE(allocate(2, kOne), block) << "kOne's handle may be a new stream's";
  streams_.reach(kOne);
  EXPECT_EQ(allocate(2, kOne), block);
}

TEST_F(StreamOrderedBlocksTest, TheLegacyStreamsHandlesAreOneStream) {
  const CUdeviceptr block = allocate(2, CU_STREAM_LEGACY);
  ASSERT_TRUE(free(block, CU_STREAM_LEGACY));
  EXPECT_EQ(allocate(2, nullptr), block);
}

// Each context has a legacy stream of its own (Note [Which stream a key names]): another
// device's context may ask for a block of this device's pool on its legacy stream, which is not
// ordered after the free, and a question in that context says nothing of this one's.
TEST_F(StreamOrderedBlocksTest, TheLegacyStreamOfAnotherContextIsAnotherStream) {
  const CUdeviceptr block = allocate(2, CU_STREAM_LEGACY);
  ASSERT_TRUE(free(block, CU_STREAM_LEGACY));
  streams_.context = 0x2000;
  streams_.idle_streams.insert(CU_STREAM_LEGACY);  // the other context's legacy stream
  EXPECT_NE(allocate(2, CU_STREAM_LEGACY), block) << "the first context's stream may still use it";
  EXPECT_TRUE(streams_.asked.empty()) << "its stream cannot be asked about from here";
  streams_.context = 0x1000;
  EXPECT_EQ(allocate(2, nullptr), block);
}

TEST_F(StreamOrderedBlocksTest, ThePerThreadStreamOfAnotherContextIsAnotherStream) {
  const CUdeviceptr block = allocate(2, CU_STREAM_PER_THREAD);
  ASSERT_TRUE(free(block, CU_STREAM_PER_THREAD));
  streams_.context = 0x2000;
  streams_.idle_streams.insert(CU_STREAM_PER_THREAD);
  EXPECT_NE(allocate(2, CU_STREAM_PER_THREAD), block);
  EXPECT_TRUE(streams_.asked.empty());
  streams_.context = 0x1000;
  EXPECT_EQ(allocate(2, CU_STREAM_PER_THREAD), block) << "its own stream, in its own context";
  EXPECT_EQ(reuse_.stats().same_stream, 1u);
}

TEST_F(StreamOrderedBlocksTest, AStreamFoundIdleHasReachedItsFrees) {
  const CUdeviceptr block = allocate(2, kOne);
  ASSERT_TRUE(free(block, kOne));
  streams_.idle_streams.insert(kOne);  // its host function has not run yet
  EXPECT_EQ(allocate(2, kTwo), block);
  EXPECT_EQ(streams_.asked, std::vector<CUstream>{kOne});
}

TEST_F(StreamOrderedBlocksTest, ThePerThreadStreamIsAskedAboutAsItself) {
  const CUdeviceptr block = allocate(2, CU_STREAM_PER_THREAD);
  ASSERT_TRUE(free(block, CU_STREAM_PER_THREAD));
  streams_.idle_streams.insert(CU_STREAM_PER_THREAD);
  EXPECT_EQ(allocate(2, kTwo), block);
  EXPECT_EQ(streams_.asked, std::vector<CUstream>{CU_STREAM_PER_THREAD});
}

// A stream found idle has run what was queued before the question: a block another thread
// launched on and freed on it meanwhile is neither another stream's nor dead.
TEST_F(StreamOrderedBlocksTest, AFreeKeptWhileItsStreamIsAskedAboutIsNotReachedByTheAnswer) {
  const CUdeviceptr first = allocate(2, kOne);
  const CUdeviceptr second = allocate(2, kOne);
  ASSERT_TRUE(free(first, kOne));
  streams_.idle_streams.insert(kOne);
  streams_.while_asked = [&] { ASSERT_TRUE(free(second, kOne)); };
  EXPECT_EQ(allocate(2, kTwo), first) << "the block freed before the question";
  EXPECT_FALSE(blocks_->is_dead(second)) << "its kernels may still be running";
}

// A thread's per-thread default stream is its own, and so is a later thread's, though glibc may
// give the later thread the stack (and thread-locals) of the one before.
TEST_F(StreamOrderedBlocksTest, ALaterThreadsDefaultStreamIsNotAnEarlierThreads) {
  CUdeviceptr freed = 0;
  std::thread([&] {
    freed = allocate(2, CU_STREAM_PER_THREAD);
    ASSERT_TRUE(free(freed, CU_STREAM_PER_THREAD));
  }).join();
  ASSERT_NE(freed, 0u);
  CUdeviceptr taken = 0;
  std::thread([&] { taken = allocate(2, CU_STREAM_PER_THREAD); }).join();
  EXPECT_NE(taken, freed) << "the earlier thread's stream may still be using it";
  EXPECT_EQ(reuse_.stats().same_stream, 0u);
}

TEST_F(StreamOrderedBlocksTest, ReachedKeptBlocksGoBackWhereTheBudgetHasNoRoom) {
  const CUdeviceptr kept = allocate(4, kOne);
  const CUdeviceptr unreached = allocate(2, kTwo);
  ASSERT_TRUE(free(kept, kOne));
  ASSERT_TRUE(free(unreached, kTwo));
  streams_.reach(kOne);
  // 2 granules of room for 3: the reached block goes back rather than be evicted.
  ASSERT_NE(allocate(3, kOne), 0u);
  EXPECT_EQ(reuse_.stats().given_up, 1u);
  EXPECT_FALSE(arena_.block_containing(kept).has_value());
  EXPECT_TRUE(arena_.block_containing(unreached).has_value()) << "kTwo may still use it";
  EXPECT_EQ(arena_.stats().host_granules, 0u) << "nothing evicted";
}

TEST_F(StreamOrderedBlocksTest, WithRoomKeptBlocksStay) {
  const CUdeviceptr kept = allocate(2, kOne);
  ASSERT_TRUE(free(kept, kOne));
  streams_.reach(kOne);
  ASSERT_NE(allocate(3, kOne), 0u);
  EXPECT_EQ(reuse_.stats().given_up, 0u);
  EXPECT_EQ(arena_blocks(), 2u);
}

TEST_F(StreamOrderedBlocksTest, WhenTheBudgetsRefuseEveryReachedKeptBlockGoesBack) {
  tiered_.host_budget.set_limit(4 * kGranuleBytes);
  const CUdeviceptr kept = allocate(4, kOne);
  ASSERT_NE(allocate(4, kTwo), 0u);  // live, and the device is full
  ASSERT_TRUE(free(kept, kOne));
  streams_.reach(kOne);
  room_.room = 64 * kGranuleBytes;  // the room looked enough, so nothing went back first
  ASSERT_NE(allocate(8, kOne), 0u);
  EXPECT_EQ(reuse_.stats().given_up, 1u);
  EXPECT_FALSE(arena_.block_containing(kept).has_value());
}

TEST_F(StreamOrderedBlocksTest, ADeviceKeepsAtMostTwiceItsBudget) {
  std::vector<CUdeviceptr> made;
  for (int i = 0; i < 5; ++i) made.push_back(allocate(4, kOne));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(free(made[i], kOne)) << i;
  EXPECT_FALSE(free(made[4], kOne)) << "16 granules kept, twice the budget of 8";
  EXPECT_EQ(reuse_.stats().kept_granules, 16u);
}

TEST_F(StreamOrderedBlocksTest, AFreeWhoseStreamCannotReportIsNotKept) {
  const CUdeviceptr block = allocate(2, kOne);
  streams_.queueing = false;
  EXPECT_FALSE(free(block, kOne)) << "the caller frees it in stream order";
  EXPECT_EQ(reuse_.stats().kept_granules, 0u);
}

TEST_F(StreamOrderedBlocksTest, AReachedBlockWithHostGranulesGoesBackInsteadOfServing) {
  make({on_host_at(2)});
  const CUdeviceptr block = allocate(2, kOne);
  ASSERT_EQ(arena_.block_containing(block)->host_granules(), 2u);
  ASSERT_TRUE(free(block, kOne));
  streams_.reach(kOne);
  ASSERT_NE(allocate(2, kTwo), 0u);
  EXPECT_EQ(reuse_.stats().given_up, 1u) << "promoting it would copy bytes nothing reads";
  EXPECT_EQ(reuse_.stats().other_stream, 0u);
  EXPECT_EQ(reuse_.stats().made, 2u);
  EXPECT_EQ(arena_blocks(), 1u);
}

TEST_F(StreamOrderedBlocksTest, ATrimOfAPlainPoolGivesBackEveryReachedKeptBlock) {
  std::vector<CUdeviceptr> made;
  for (int i = 0; i < 4; ++i) made.push_back(allocate(1, i < 3 ? kOne : kTwo));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(free(made[i], i < 3 ? kOne : kTwo));
  streams_.reach(kOne);
  blocks_->pool_trimmed(fake_pool(7));
  EXPECT_EQ(arena_blocks(), 4u) << "not a pool of the shim's";
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_EQ(reuse_.stats().given_up, 3u);
  EXPECT_EQ(arena_blocks(), 1u) << "kTwo has not reached its free";
  streams_.idle_streams.insert(kTwo);
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_EQ(arena_blocks(), 0u);
  EXPECT_EQ(reuse_.stats().kept_granules, 0u);
}

// Note [Stream-ordered requests in the arena]: with the prefetch mover a request is a managed
// block, brought in as any new one, and kept for reuse as an arena block is; its allocation spans
// whole pages, so that any later request of as many pages fits in it.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverARequestIsAManagedBlockOfWholePages) {
  make_prefetched();
  CUdeviceptr block = 0;
  ASSERT_EQ(blocks_->allocate(0, fake_pool(1), 3 * kGranuleBytes - 4096, kOne, &block),
            CUDA_SUCCESS);
  EXPECT_EQ(managed_.sizes.at(block), 3 * kGranuleBytes);
  EXPECT_EQ(on_device(block), true);
  EXPECT_EQ(arena_blocks(), 0u);
  ASSERT_TRUE(free(block, kOne));
  EXPECT_EQ(allocate(3, kOne), block) << "a request of the 3 whole pages fits in it";
  EXPECT_EQ(managed_.sizes.size(), 1u);
  EXPECT_EQ(recorded(ledger_, core::Route::kTiered).live_count, 1u);
  EXPECT_EQ(reuse_.stats().same_stream, 1u);
}

// Where the budget has no room for a new block, kept blocks whose frees were reached are freed
// first, not prefetched to the host with their dead bytes, and no live block is evicted.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverReachedKeptBlocksAreFreedNotEvicted) {
  make_prefetched();
  const CUdeviceptr kept = allocate(4, kOne);
  const CUdeviceptr live = allocate(4, kTwo);  // the budget of 8 is full
  ASSERT_TRUE(free(kept, kOne));
  streams_.reach(kOne);
  const CUdeviceptr made = allocate(3, kOne);
  ASSERT_NE(made, 0u);
  EXPECT_EQ(managed_.released, std::vector<CUdeviceptr>{kept});
  EXPECT_TRUE(managed_.to_host.empty()) << "nothing evicted";
  EXPECT_EQ(on_device(live), true);
  EXPECT_EQ(on_device(made), true);
  EXPECT_EQ(reuse_.stats().given_up, 1u);
}

// Note [Dead blocks and the prefetch mover]: a launch whose promotion needs room gets it from a
// kept block whose free was reached, freed rather than prefetched to the host with its dead
// bytes, before any live block would be evicted.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverALaunchFreesDeadBlocksForRoom) {
  make_prefetched();
  const CUdeviceptr kept = allocate(4, kOne);
  const CUdeviceptr live = allocate(4, kTwo);  // the budget of 8 is full
  const CUdeviceptr waiting = allocate(2, kOne);
  ASSERT_EQ(on_device(waiting), false) << "a new block takes free room only";
  ASSERT_TRUE(free(kept, kOne));
  streams_.reach(kOne);
  core::SubmissionUse use;
  use.sequence = 1;
  use.stream = reinterpret_cast<uint64_t>(kOne);
  use.blocks[use.count++] = waiting;
  prefetch_.before_submission(use);
  EXPECT_EQ(on_device(waiting), true);
  EXPECT_EQ(managed_.released, std::vector<CUdeviceptr>{kept});
  EXPECT_TRUE(managed_.to_host.empty()) << "nothing evicted";
  EXPECT_EQ(on_device(live), true);
  EXPECT_EQ(prefetch_.stats().dead_freed, 1u);
  EXPECT_EQ(reuse_.stats().given_up, 1u);
  EXPECT_EQ(reuse_.stats().kept_granules, 0u);
  EXPECT_EQ(tiered_.use.tracked(), 2u) << "no submission may name the freed block";
}

// A kept block whose free is not reached may still be read by its stream's work: evicted, if the
// policy says so, with its bytes.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverAnUnreachedKeptBlockIsNotFreed) {
  make_prefetched();
  const CUdeviceptr kept = allocate(4, kOne);
  ASSERT_NE(allocate(4, kTwo), 0u);
  const CUdeviceptr waiting = allocate(2, kOne);
  ASSERT_TRUE(free(kept, kOne));
  core::SubmissionUse use;
  use.stream = reinterpret_cast<uint64_t>(kTwo);
  use.blocks[use.count++] = waiting;
  for (uint64_t launch = 1; launch <= 10 && on_device(waiting) == false; ++launch) {
    use.sequence = launch;
    prefetch_.before_submission(use);  // until admission lets it in
  }
  EXPECT_TRUE(managed_.released.empty());
  EXPECT_EQ(prefetch_.stats().dead_freed, 0u);
  EXPECT_EQ(reuse_.stats().kept_granules, 4u);
}

// A reached kept block the books have on the host would be promoted by its first launch, dead
// bytes and all: it is freed, and the request gets a new block.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverAReachedBlockOnTheHostGoesBack) {
  make_prefetched({on_host_at(2)});
  const CUdeviceptr block = allocate(2, kOne);
  ASSERT_EQ(on_device(block), false);
  ASSERT_TRUE(free(block, kOne));
  streams_.reach(kOne);
  EXPECT_NE(allocate(2, kTwo), block);
  EXPECT_EQ(managed_.released, std::vector<CUdeviceptr>{block});
  EXPECT_EQ(reuse_.stats().given_up, 1u);
  EXPECT_EQ(reuse_.stats().other_stream, 0u);
}

TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverATrimFreesTheReachedKeptBlocks) {
  make_prefetched();
  const CUdeviceptr reached = allocate(1, kOne);
  const CUdeviceptr unreached = allocate(1, kTwo);
  ASSERT_TRUE(free(reached, kOne));
  ASSERT_TRUE(free(unreached, kTwo));
  streams_.reach(kOne);
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_EQ(managed_.released, std::vector<CUdeviceptr>{reached});
  EXPECT_EQ(prefetch_.held(0).blocks, 1u);
}

// While a stream captures, a trim frees nothing (cuMemFree would break a global-mode capture),
// and a request makes no managed memory: the kept block serves it. Once the capture is over, a
// trim frees what is kept.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverNothingIsFreedOrMadeDuringACapture) {
  make_prefetched();
  const CUdeviceptr reached = allocate(1, kOne);
  ASSERT_TRUE(free(reached, kOne));
  streams_.reach(kOne);
  managed_device_.moves = false;
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_TRUE(managed_.released.empty());
  const std::size_t made = managed_.sizes.size();
  EXPECT_EQ(allocate(1, kOne), reached) << "the kept block serves during a capture";
  EXPECT_EQ(managed_.sizes.size(), made);
  ASSERT_TRUE(free(reached, kOne));
  streams_.reach(kOne);
  managed_device_.moves = true;
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_EQ(managed_.released, std::vector<CUdeviceptr>{reached});
}

// Note [Managed memory and captures begun meanwhile]: a request while a stream captures, with no
// kept block to serve it, makes no managed memory: it is a block of the remap mover, whose VMM
// calls a capture allows.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverARequestDuringACaptureIsARemapBlock) {
  make_prefetched();
  managed_device_.moves = false;
  EXPECT_NE(allocate(1, kOne), 0u);
  EXPECT_TRUE(managed_.sizes.empty()) << "managed memory made during a capture";
  EXPECT_EQ(arena_blocks(), 1u);
  EXPECT_EQ(recorded(ledger_, core::Route::kTiered).live_count, 1u);
}

// A capture that begins right after a trim's first test still finds no managed memory freed, and
// every cuMemAllocManaged and cuMemFree of the requests and trims is made holding captures off.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverACaptureBegunAfterTheTestFreesNothing) {
  make_prefetched({on_host_at(2)});
  const CUdeviceptr reached = allocate(1, kOne);
  const CUdeviceptr on_host = allocate(2, kOne);
  ASSERT_TRUE(free(reached, kOne));
  ASSERT_TRUE(free(on_host, kOne));
  streams_.reach(kOne);
  managed_device_.answers_before_capture = 1;
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_TRUE(managed_.released.empty());
  EXPECT_EQ(reuse_.stats().kept_granules, 3u) << "both still kept";
  EXPECT_EQ(allocate(2, kTwo), on_host) << "it serves, on the host, rather than be freed";
  EXPECT_TRUE(managed_.released.empty());
  managed_device_.moves = true;
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_EQ(managed_.released, std::vector<CUdeviceptr>{reached}) << "once the capture is over";
  EXPECT_EQ(managed_.captures_held_off, std::vector<bool>(managed_.captures_held_off.size(), true));
  EXPECT_EQ(managed_.captures_held_off.size(), 3u) << "two allocations, one free";
}

// A kept managed block whose stream cannot say when it gets there is not the caller's to free:
// cuMemFree could break a capture in progress. Its stream is waited for, and it is freed when
// its mover frees reached blocks.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverAFreeWhoseStreamCannotReportStaysKept) {
  make_prefetched();
  const CUdeviceptr waited = allocate(1, kOne);
  const CUdeviceptr not_waited = allocate(1, kTwo);
  streams_.queueing = false;
  EXPECT_TRUE(free(waited, kOne));
  EXPECT_EQ(streams_.waited_for, std::vector<CUstream>{kOne});
  EXPECT_TRUE(reuse_.is_reached(waited));
  streams_.waiting = false;
  EXPECT_TRUE(free(not_waited, kTwo)) << "kept until its stream is found idle";
  EXPECT_FALSE(reuse_.is_reached(not_waited));
  EXPECT_TRUE(managed_.released.empty());
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_EQ(managed_.released, std::vector<CUdeviceptr>{waited});
  streams_.idle_streams.insert(kTwo);
  blocks_->pool_trimmed(fake_pool(1));
  EXPECT_EQ(managed_.released, (std::vector<CUdeviceptr>{waited, not_waited}));
}

// Nor does it stay kept for good when the program destroys its stream: the last host function
// queued there reaches it.
TEST_F(StreamOrderedBlocksTest, AFreeWhoseStreamCannotReportIsReachedOnceItsEndedStreamIs) {
  make_prefetched();
  const CUdeviceptr block = allocate(1, kTwo);
  streams_.queueing = false;
  streams_.waiting = false;
  ASSERT_TRUE(free(block, kTwo));
  streams_.queueing = true;
  blocks_->stream_ended(kTwo);
  EXPECT_FALSE(reuse_.is_reached(block)) << "kTwo may still run the work before the free";
  streams_.reach(kTwo);
  EXPECT_TRUE(reuse_.is_reached(block));
}

// A stream is asked about only while it is not being destroyed: the handle would be gone, or
// another stream's. Its end waits for a question in flight.
TEST_F(StreamOrderedBlocksTest, AStreamEndsOnlyOnceTheQuestionAboutItIsAnswered) {
  expect_an_end_to_wait_for_the_question([&] { blocks_->stream_ended(kOne); });
}

// A context's streams end with it: their questions are answered first, as for one stream.
TEST_F(StreamOrderedBlocksTest, AContextsStreamsEndOnlyOnceTheQuestionAboutOneIsAnswered) {
  expect_an_end_to_wait_for_the_question([&] { blocks_->all_streams_ended(); });
}

// A device the prefetch mover cannot serve keeps its requests in the arena, and a reached kept
// block with host granules still goes back there.
TEST_F(StreamOrderedBlocksTest, WithThePrefetchMoverADeviceItCannotServeUsesTheArena) {
  managed_device_.serves = false;
  make_prefetched({on_host_at(2)});
  const CUdeviceptr block = allocate(2, kOne);
  ASSERT_TRUE(arena_.block_containing(block).has_value());
  ASSERT_TRUE(free(block, kOne));
  streams_.reach(kOne);
  ASSERT_NE(allocate(2, kTwo), 0u);
  EXPECT_EQ(reuse_.stats().given_up, 1u);
  EXPECT_EQ(arena_blocks(), 1u);
  EXPECT_TRUE(managed_.sizes.empty());
}

TEST_F(StreamOrderedBlocksTest, RequestsTieredModeDoesNotServeGoToTheirPool) {
  EXPECT_EQ(allocate(1, kOne, fake_pool(7)), 0u) << "not a plain pool of the device";
  config_.tiered.min_size = 2 * kGranuleBytes;
  EXPECT_EQ(allocate(1, kOne), 0u) << "below min_size";
  config_.tiered.min_size = kGranuleBytes;
  config_.tiered.stream_ordered = StreamOrderedMode::kPool;
  EXPECT_EQ(allocate(1, kOne), 0u);
  config_.tiered.stream_ordered = StreamOrderedMode::kArena;
  config_.spill.mode = SpillMode::kAuto;
  EXPECT_EQ(allocate(1, kOne), 0u);
  EXPECT_EQ(arena_blocks(), 0u);
}

}  // namespace
}  // namespace vramspill::placement
