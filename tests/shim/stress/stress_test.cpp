// Every allocation route at once, from many threads, over the budget (tests/shim/stress/
// CMakeLists.txt runs it with spilling on and off, and in tiered mode with each mover, in the
// plain, ASan and TSan builds).
//
// Each thread makes a fixed number of allocations, each by a route and of a size drawn from its
// own seeded generator (so a run is the same work every time, whatever the interleaving): picks
// a route (cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemAllocAsync,
// cuMemAllocFromPoolAsync on a created pool, cuMemCreate + cuMemAddressReserve + cuMemMap +
// cuMemSetAccess), fills the block with a pattern of its own, and keeps at most kMaxLive blocks;
// to make room it checks every byte of one of them and frees it, sometimes on its other stream.
// Some blocks are freed early instead: with writes still queued on their stream, which the free
// must wait for before the memory goes to another block (a free that does not shows as another
// block's bytes overwritten).
//
// Checked: every byte of every block that was kept; no error but CUDA_ERROR_OUT_OF_MEMORY, and
// that only where the run allows a refusal (spilling off, or cuMemCreate, which spills only as a
// host-located handle within the host limit); blocks are where SPILL_EXPECT says (a spilled
// cuMemCreate in host memory: Note [Host-located VMM spills] in shim/placement/vmm_spill.h); the
// device memory the program holds by the routes that count their own bytes never exceeds the
// budget (pools count what they reserve, which the program does not see); at the end everything
// is freed and, once the pools are trimmed, the whole budget is free again.
//
// SPILL_EXPECT=tiered: tiered mode, whose blocks (cuMemAlloc and cuMemAllocPitch of at least
// [tiered] min_size, and the default pool's cuMemAllocAsync) move as the threads use them. With
// the remap mover a tiered block is device memory to the driver wherever
// its granules are, with the prefetch mover managed memory; what tiered mode does not take spills
// as in auto mode, to managed memory. So a block off the device must be managed memory (or, for
// cuMemCreate, host memory), and it counts as spilled whether it is a spill or a prefetch
// mover's block; the program cannot tell which bytes of its blocks are on the device, so only the
// driver's own count holds the budget, and whether blocks moved is the exit summary's to say (the
// ctest entries check it).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <latch>
#include <thread>

#include "spill_support.h"
#include "stress_blocks.h"

namespace {

using stress::Block;
using stress::Route;
using stress::route_name;

constexpr int kThreads = 8;
// Allocations per thread; STRESS_ITERATIONS sets another count (the ThreadSanitizer build, which
// runs far slower, makes fewer).
int iterations() {
  const char* value = std::getenv("STRESS_ITERATIONS");
  return value != nullptr ? std::atoi(value) : 150;
}
constexpr std::size_t kMaxLive = 4;
// Sizes: 64 KiB to 2 MiB. Eight threads keeping four blocks each hold more than the budget.
constexpr std::size_t kPage = 4096;
constexpr std::size_t kMinPages = 16;
constexpr std::size_t kMaxPages = 512;
// One in kEarlyFreeOdds blocks is freed early, behind kEarlyWrites more memsets on its stream.
constexpr uint64_t kEarlyFreeOdds = 6;
constexpr int kEarlyWrites = 3;
constexpr uint64_t kSeed = 0x5eed;

struct RouteCounts {
  std::atomic<uint64_t> allocations{0};
  std::atomic<uint64_t> spilled{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> early_frees{0};
  std::atomic<uint64_t> verified_bytes{0};
};

bool tiered_mode() { return spill::expected_setting() == "tiered"; }

class Stress : public spill::SpillTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SpillTest::SetUp());
    shared_.device = device_;
    // A created pool capped at a third of the budget: past the cap the driver refuses and the
    // shim spills (or refuses) as for a full device.
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    props.maxSize = budget_ / 3;
    ASSERT_CU(cuMemPoolCreate(&shared_.pool, &props));
    ASSERT_CU(cuDeviceGetDefaultMemPool(&default_pool_, device_));
    CUmemAllocationProp vmm{};
    vmm.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    vmm.location = props.location;
    ASSERT_CU(cuMemGetAllocationGranularity(&shared_.vmm_granularity, &vmm,
                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  }

  void TearDown() override {
    if (shared_.pool != nullptr) {
      EXPECT_CU(cuMemPoolDestroy(shared_.pool));
    }
    SpillTest::TearDown();
  }

  // False (and a test failure) for anything but success.
  bool succeeded(CUresult result, int thread, const char* what) {
    if (result == CUDA_SUCCESS) return true;
    ADD_FAILURE() << "thread " << thread << ": " << what << " returned " << result;
    failed_ = true;
    return false;
  }

  // Whether `block`'s bytes count against the budget as the program sees them: device memory
  // of the routes the ledger counts by their own size (pools count what they reserve), and in
  // tiered mode of cuMemCreate alone (any other block may be tiered, its granules anywhere).
  static bool counted_by_size(const Block& block, spill::Tier tier) {
    const bool by_size =
        block.route == Route::kVmm ||
        (!tiered_mode() && (block.route == Route::kAlloc || block.route == Route::kPitch));
    return by_size && tier == spill::Tier::kDevice;
  }

  // Where `block` landed: checks it is a tier this run allows, counts spills and the bytes it
  // holds on the device. Returns whether they count by their size.
  // Where `block` lives, by the driver's answer; a VMM block by its handle's location.
  static spill::Tier tier_of(const Block& block) {
    if (block.route != Route::kVmm) return spill::tier_of(block.pointer);
    CUmemAllocationProp prop{};
    if (cuMemGetAllocationPropertiesFromHandle(&prop, block.handle) != CUDA_SUCCESS)
      return spill::Tier::kUnknown;
    return prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? spill::Tier::kDevice
                                                             : spill::Tier::kHost;
  }

  bool place(const Block& block, int thread) {
    const spill::Tier tier = tier_of(block);
    RouteCounts& counts = counts_[static_cast<std::size_t>(block.route)];
    if (block.route == Route::kManaged) {
      EXPECT_EQ(tier, spill::Tier::kManaged) << "thread " << thread;
    } else if (tier != spill::Tier::kDevice) {
      counts.spilled.fetch_add(1);
      const spill::Tier allowed = block.route == Route::kVmm ? spill::Tier::kHost
                                  : tiered_mode()            ? spill::Tier::kManaged
                                                             : spill::expected_tier();
      EXPECT_TRUE(!spill::spilling_off() && tier == allowed)
          << "thread " << thread << ": a " << route_name(block.route) << " block in "
          << spill::tier_name(tier) << " memory";
    }
    if (!counted_by_size(block, tier)) return false;
    const std::size_t held = device_bytes_.fetch_add(block.bytes) + block.bytes;
    EXPECT_LE(held, budget_) << "thread " << thread << ": the program holds more device memory "
                             << "than the budget (a " << route_name(block.route) << " block)";
    return true;
  }

  void release(const Block& block, bool counted, CUstream stream, int thread) {
    // Before the free: the ledger forgets a block before the driver frees it.
    if (counted) device_bytes_.fetch_sub(block.bytes);
    succeeded(stress::release(block, stream), thread, "freeing a block");
  }

  struct Live {
    Block block;
    bool counted;
  };

  // Checks every byte of `live`, then frees it: stream-ordered blocks on either stream (the
  // check synchronised with the block's own), cuMemAlloc/cuMemAllocPitch blocks sometimes by
  // cuMemFreeAsync.
  void retire(const Live& live, const stress::Streams& streams, std::mt19937_64& random,
              std::vector<uint32_t>& scratch, int thread) {
    const Block& block = live.block;
    stress::Mismatch wrong;
    if (succeeded(stress::check(block, scratch, wrong), thread, "copying a block back")) {
      if (wrong.words != 0) {
        ADD_FAILURE() << "thread " << thread << ": " << wrong.words << " of " << block.bytes / 4
                      << " words wrong in a " << route_name(block.route) << " block of "
                      << block.bytes << " bytes at 0x" << std::hex << block.pointer << " ("
                      << spill::tier_name(spill::tier_of(block.pointer)) << ", filled by "
                      << (block.constant ? "a memset" : "a copy")
                      << (block.stream == nullptr ? "" : " on a stream") << "): the first, word "
                      << std::dec << wrong.first << ", is 0x" << std::hex << wrong.first_value
                      << ", not 0x" << stress::expected_word(block, wrong.first) << std::dec;
        failed_ = true;
      }
      counts_[static_cast<std::size_t>(block.route)].verified_bytes.fetch_add(block.bytes);
    }
    CUstream stream = nullptr;
    if (stress::is_stream_ordered(block.route)) {
      stream = random() % 4 == 0 ? streams[random() % 2] : block.stream;
    } else if (block.route == Route::kAlloc || block.route == Route::kPitch) {
      stream = random() % 4 == 0 ? streams[random() % 2] : nullptr;
    }
    release(block, live.counted, stream, thread);
  }

  enum class Made { kFilled, kRefused, kFailed };
  // Allocates `block` by its route, counts what became of it, checks where it landed and fills
  // it; `counted`: whether its bytes count against the budget (place()).
  Made make(Block& block, bool& counted, const stress::Streams& streams, std::mt19937_64& random,
            std::vector<uint32_t>& scratch, int thread) {
    RouteCounts& counts = counts_[static_cast<std::size_t>(block.route)];
    const CUresult result = stress::allocate(block, shared_, streams[random() % 2]);
    if (result == CUDA_ERROR_OUT_OF_MEMORY) {
      counts.refused.fetch_add(1);
      EXPECT_TRUE(spill::spilling_off() || block.route == Route::kVmm)
          << "thread " << thread << ": " << route_name(block.route) << " of " << block.bytes
          << " bytes refused with spilling on";
      return Made::kRefused;
    }
    if (!succeeded(result, thread, route_name(block.route))) return Made::kFailed;
    counts.allocations.fetch_add(1);
    counted = place(block, thread);
    if (!succeeded(stress::fill(block, streams[0], random, scratch), thread, "filling a block"))
      return Made::kFailed;
    return Made::kFilled;
  }

  // Each thread first holds a cuMemAlloc block of a sixth of the budget until every thread holds
  // one, then checks and frees it: eight of them are a third more than the budget, so the run
  // spills (or, spilling off, is refused) whatever the scheduler does. Left alone, threads that
  // ran one after another (ThreadSanitizer on two cores) once fitted in the budget and spilled
  // nothing.
  void hold_a_sixth_together(const stress::Streams& streams, std::mt19937_64& random,
                             std::vector<uint32_t>& scratch, int thread) {
    Block block;
    block.route = Route::kAlloc;
    block.bytes = budget_ / 6 / kPage * kPage;
    block.seed = static_cast<uint32_t>(thread) << 24 | 0xffffffU;
    bool counted = false;
    const bool made = make(block, counted, streams, random, scratch, thread) == Made::kFilled;
    all_hold_a_sixth_.arrive_and_wait();
    if (made) retire({block, counted}, streams, random, scratch, thread);
  }

  void run_thread(int thread) {
    stress::Streams streams{};
    bool started = succeeded(cuCtxSetCurrent(context_), thread, "cuCtxSetCurrent");
    for (CUstream& stream : streams)
      started = started &&
                succeeded(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), thread, "cuStreamCreate");
    if (!started) {
      all_hold_a_sixth_.count_down();  // arrives all the same: no thread waits for this one
      return;
    }
    std::mt19937_64 random(kSeed + static_cast<uint64_t>(thread));
    std::uniform_int_distribution<std::size_t> pages(kMinPages, kMaxPages);
    std::vector<Live> live;
    std::vector<uint32_t> scratch;
    hold_a_sixth_together(streams, random, scratch, thread);
    for (int i = 0; i < iterations_ && !failed_; ++i) {
      if (live.size() == kMaxLive) {
        const std::size_t which = random() % live.size();
        retire(live[which], streams, random, scratch, thread);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(which));
      }
      Block block;
      block.route = static_cast<Route>(random() % stress::kRouteCount);
      block.bytes = pages(random) * kPage;
      block.seed = static_cast<uint32_t>(thread) << 24 | static_cast<uint32_t>(i);
      RouteCounts& counts = counts_[static_cast<std::size_t>(block.route)];
      bool counted = false;
      const Made made = make(block, counted, streams, random, scratch, thread);
      if (made == Made::kRefused) continue;
      if (made == Made::kFailed) break;
      if (block.route == Route::kVmm || random() % kEarlyFreeOdds != 0) {
        live.push_back({block, counted});
        continue;
      }
      // Freed early: its stream is still writing it. That is the stream it was filled on: the
      // legacy stream (nullptr) after a synchronous fill, which may still be running, as on a
      // GPU, and which the created streams (non-blocking) would not wait for.
      const CUstream writer = block.stream;
      for (int w = 0; w < kEarlyWrites; ++w)
        succeeded(cuMemsetD32Async(block.pointer, ~0U, block.bytes / 4, writer), thread,
                  "cuMemsetD32Async");
      counts.early_frees.fetch_add(1);
      release(block, counted, stress::is_stream_ordered(block.route) ? writer : nullptr, thread);
    }
    for (const Live& block : live) retire(block, streams, random, scratch, thread);
    for (CUstream stream : streams) {
      succeeded(cuStreamSynchronize(stream), thread, "cuStreamSynchronize");
      succeeded(cuStreamDestroy(stream), thread, "cuStreamDestroy");
    }
  }

  const int iterations_ = iterations();
  stress::Shared shared_;
  CUmemoryPool default_pool_ = nullptr;
  std::array<RouteCounts, stress::kRouteCount> counts_;
  std::atomic<std::size_t> device_bytes_{0};
  std::atomic<bool> failed_{false};
  std::latch all_hold_a_sixth_{kThreads};
};

TEST_F(Stress, EveryRouteFromManyThreads) {
  ASSERT_GT(iterations_, 0) << "STRESS_ITERATIONS must be a positive number";
  // The device memory the driver itself has handed out, asked past the shim while the threads
  // run: it must stay within the budget at every moment, pools' growth included (Note
  // [Stream-ordered pools in the budget] in shim/core/ledger.h).
  const auto driver_info = spill::behind_the_shim<decltype(&cuMemGetInfo_v2)>("cuMemGetInfo_v2");
  ASSERT_NE(driver_info, nullptr);
  size_t free_at_start = 0;
  size_t total = 0;
  ASSERT_CU(driver_info(&free_at_start, &total));
  std::atomic<bool> running{true};
  size_t most_used = 0;
  std::thread watcher([&] {
    while (running.load()) {
      size_t free = 0;
      if (driver_info(&free, &total) == CUDA_SUCCESS && free < free_at_start)
        most_used = std::max(most_used, free_at_start - free);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([this, t] { run_thread(t); });
  for (std::thread& thread : threads) thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  running.store(false);
  watcher.join();
  EXPECT_LE(most_used, budget_) << "the driver handed out more device memory than the budget";

  EXPECT_FALSE(failed_);
  EXPECT_EQ(device_bytes_.load(), 0U);
  // Pools keep what they reserved until trimmed; then the budget is whole again.
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemPoolTrimTo(default_pool_, 0));
  ASSERT_CU(cuMemPoolTrimTo(shared_.pool, 0));
  EXPECT_EQ(free_bytes(), expected_free(0)) << "the budget is not all free again";

  uint64_t allocations = 0, spilled = 0, refused = 0, verified = 0;
  for (std::size_t r = 0; r < stress::kRouteCount; ++r) {
    const RouteCounts& c = counts_[r];
    std::printf("stress: %-23s %4" PRIu64 " allocations, %4" PRIu64 " spilled, %4" PRIu64
                " refused, %3" PRIu64 " freed early, %6.1f MiB verified\n",
                route_name(static_cast<Route>(r)), c.allocations.load(), c.spilled.load(),
                c.refused.load(), c.early_frees.load(),
                static_cast<double>(c.verified_bytes.load()) / spill::kMiB);
    EXPECT_GT(c.allocations.load(), 0U) << route_name(static_cast<Route>(r));
    allocations += c.allocations;
    spilled += c.spilled;
    refused += c.refused;
    verified += c.verified_bytes;
  }
  std::printf("stress: %d threads x %d iterations in %.2f s: %" PRIu64 " allocations, %" PRIu64
              " spilled, %" PRIu64 " refused, %.1f MiB verified\n",
              kThreads, iterations_, seconds, allocations, spilled, refused,
              static_cast<double>(verified) / spill::kMiB);
  if (spill::spilling_off()) {
    EXPECT_EQ(spilled, 0U);
    EXPECT_GT(refused, 0U) << "nothing refused: the test does not oversubscribe";
  } else if (!tiered_mode()) {
    EXPECT_GT(spilled, 0U) << "nothing spilled: the test does not oversubscribe";
  }
}

}  // namespace
