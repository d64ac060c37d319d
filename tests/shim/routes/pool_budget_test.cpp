// Stream-ordered pools under the budget (Note [Stream-ordered pools in the budget] in
// shim/core/ledger.h): the device never holds more than the limit through a pool, even when the
// pool grows for a request its unused reserve was expected to serve, or several pools grow at
// once; concurrent requests are not refused below the limit; a pool's memory given back at a
// synchronisation is not held against other routes.
//
// Runs under the shim only (256 MiB of simcuda's 1 GiB, spill off) with
// VRAMSPILL_REPORT_MEMORY_INFO=physical, so that cuMemGetInfo shows what the device really holds.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "routes_support.h"

namespace {

using routes::kBudget;
using routes::kMiB;

class PoolBudget : public routes::PrimaryContextTest<> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(PrimaryContextTest::SetUp());
    ASSERT_TRUE(routes::under_shim()) << "these cases test the shim's budget";
    ASSERT_CU(cuDeviceGetDefaultMemPool(&pool_, device()));
  }

  // Device memory in use, as the driver counts it (memory_info = physical).
  static size_t device_used() {
    size_t free = 0;
    size_t total = 0;
    EXPECT_CU(cuMemGetInfo(&free, &total));
    return total - free;
  }

  CUmemoryPool pool_ = nullptr;
};

// A stream held by a gate, until the test opens it.
class StreamGate {
 public:
  void hold(CUstream stream) {
    ASSERT_CU(cuLaunchHostFunc(
        stream, [](void* gate) { static_cast<StreamGate*>(gate)->wait(); }, this));
  }
  void open() {
    {
      const std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }

 private:
  void wait() {
    std::unique_lock lock(mutex_);
    opened_.wait(lock, [this] { return open_; });
  }

  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

// A created pool capped at 24 MiB grows by what a request needs, not by the 32 MiB chunk its cap
// cannot hold (simcuda, as the driver): with 16 MiB of the budget left, a 1 MiB request from it
// is admitted, where charging the chunk refused it (and, with eight threads contending for the
// budget, refused every request of such a pool in the stress test).
TEST_F(PoolBudget, ACappedPoolIsChargedOnlyWhatItsCapLetsItGrow) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device()};
  props.maxSize = 24 * kMiB;
  CUmemoryPool capped = nullptr;
  ASSERT_CU(cuMemPoolCreate(&capped, &props));
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr held = 0;
  ASSERT_CU(cuMemAlloc(&held, kBudget - 16 * kMiB));
  CUdeviceptr block = 0;
  EXPECT_CU(cuMemAllocFromPoolAsync(&block, 1 * kMiB, capped, stream));
  EXPECT_LE(device_used(), kBudget);
  if (block != 0) {
    EXPECT_CU(cuMemFreeAsync(block, stream));
  }
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_CU(cuMemFree(held));
  EXPECT_CU(cuStreamDestroy(stream));
  EXPECT_CU(cuMemPoolDestroy(capped));
}

// A 192 MiB block freed on a stream that has not reached the free yet, then 4 MiB requests on
// another stream: the pool's unused reserve (192 MiB) admits each request "for free", but the pool
// cannot hand out memory whose free is still pending (and may not wait for it here), so it grows
// instead. The device must never hold more than 256 MiB: growth past it is given back, and the
// request refused (spilling is off). Once the free has run, the requests fit.
TEST_F(PoolBudget, GrowthBeyondTheIdleReserveStaysWithinTheLimit) {
  int no = 0;
  ASSERT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &no));
  CUstream held = nullptr;
  CUstream other = nullptr;
  ASSERT_CU(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUdeviceptr big = 0;
  ASSERT_CU(cuMemAllocAsync(&big, 192 * kMiB, held));
  ASSERT_CU(cuStreamSynchronize(held));
  StreamGate gate;
  ASSERT_NO_FATAL_FAILURE(gate.hold(held));
  ASSERT_CU(cuMemFreeAsync(big, held));

  std::vector<CUdeviceptr> blocks;
  size_t peak = device_used();
  int refused = 0;
  for (int i = 0; i < 24; ++i) {
    CUdeviceptr block = 0;
    const CUresult result = cuMemAllocAsync(&block, 4 * kMiB, other);
    peak = std::max(peak, device_used());
    if (result == CUDA_ERROR_OUT_OF_MEMORY) {
      ++refused;
      continue;
    }
    ASSERT_CU(result) << "request " << i;
    blocks.push_back(block);
  }
  EXPECT_LE(peak, kBudget);
  EXPECT_GT(refused, 0) << "the pool was expected to need more than the budget";

  gate.open();
  ASSERT_CU(cuStreamSynchronize(held));  // the 192 MiB is free now, and given back
  for (; refused > 0; --refused) {
    CUdeviceptr block = 0;
    ASSERT_CU(cuMemAllocAsync(&block, 4 * kMiB, other));
    blocks.push_back(block);
  }
  EXPECT_LE(device_used(), kBudget);
  for (CUdeviceptr block : blocks) EXPECT_CU(cuMemFreeAsync(block, other));
  EXPECT_CU(cuStreamSynchronize(other));
  EXPECT_CU(cuStreamDestroy(held));
  EXPECT_CU(cuStreamDestroy(other));
}

// Two threads each alternate a 100 MiB request, its free and a synchronisation: at most 200 MiB
// is live, so under 256 MiB nothing may be refused. An in-flight request must not count twice
// (its reservation and the pool growth it caused).
TEST_F(PoolBudget, ConcurrentRequestsBelowTheLimitAreNeverRefused) {
  constexpr int kRounds = 600;
  std::atomic<int> refused{0};
  std::atomic<int> failed{0};
  const auto run = [&] {
    if (cuCtxSetCurrent(context()) != CUDA_SUCCESS) {
      ++failed;
      return;
    }
    CUstream stream = nullptr;
    if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      ++failed;
      return;
    }
    for (int round = 0; round < kRounds; ++round) {
      CUdeviceptr block = 0;
      const CUresult result = cuMemAllocAsync(&block, 100 * kMiB, stream);
      if (result == CUDA_ERROR_OUT_OF_MEMORY) {
        ++refused;
        continue;
      }
      if (result != CUDA_SUCCESS || cuMemFreeAsync(block, stream) != CUDA_SUCCESS ||
          cuStreamSynchronize(stream) != CUDA_SUCCESS)
        ++failed;
    }
    if (cuStreamDestroy(stream) != CUDA_SUCCESS) ++failed;
  };
  std::thread first(run);
  std::thread second(run);
  first.join();
  second.join();
  EXPECT_EQ(refused.load(), 0) << "of " << 2 * kRounds;
  EXPECT_EQ(failed.load(), 0);
}

// A pool gives its idle memory back at a synchronisation, which the shim does not see. A
// cuMemAlloc that needs that memory must not be refused for it, although nothing (no cuMemGetInfo,
// no other stream-ordered call) has told the shim before.
TEST_F(PoolBudget, MemoryAPoolGaveBackIsFreeForOtherRoutes) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr pooled = 0;
  ASSERT_CU(cuMemAllocAsync(&pooled, 200 * kMiB, stream));
  ASSERT_CU(cuMemFreeAsync(pooled, stream));
  ASSERT_CU(cuStreamSynchronize(stream));  // the pool (threshold 0) releases the 200 MiB here
  CUdeviceptr plain = 0;
  EXPECT_CU(cuMemAlloc(&plain, 200 * kMiB));
  EXPECT_LE(device_used(), kBudget);
  if (plain != 0) {
    EXPECT_CU(cuMemFree(plain));
  }
  EXPECT_CU(cuStreamDestroy(stream));
}

// Eight pools, one a thread, each emptied after every 2 MiB request so that the next one grows
// it by a 32 MiB chunk, beside 170 MiB held: two chunks fit in the 86 MiB left, and then 22 MiB
// that a request fits but its chunk does not. Each growth happens inside the driver call, so the
// chunk must be reserved before it: reserving the 2 MiB a request needs let pools grow past the
// budget until the shim gave the growth back (266 MiB seen under 256).
TEST_F(PoolBudget, PoolsGrowingAtOnceNeverTakeMoreThanTheLimit) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 60;
  CUdeviceptr held = 0;
  ASSERT_CU(cuMemAlloc(&held, 170 * kMiB));
  std::atomic<bool> running{true};
  std::atomic<size_t> peak{device_used()};
  std::thread watcher([&] {
    ASSERT_CU(cuCtxSetCurrent(context()));
    while (running.load()) {
      size_t seen = peak.load();
      const size_t now = device_used();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
    }
  });
  std::atomic<int> served{0};
  std::atomic<int> failed{0};
  const auto run = [&] {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device()};
    CUmemoryPool pool = nullptr;
    CUstream stream = nullptr;
    if (cuCtxSetCurrent(context()) != CUDA_SUCCESS ||
        cuMemPoolCreate(&pool, &props) != CUDA_SUCCESS ||
        cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      ++failed;
      return;
    }
    for (int round = 0; round < kRounds; ++round) {
      CUdeviceptr block = 0;
      const CUresult result = cuMemAllocFromPoolAsync(&block, 2 * kMiB, pool, stream);
      if (result == CUDA_ERROR_OUT_OF_MEMORY) continue;  // no chunk's room left: refused
      if (result != CUDA_SUCCESS || cuMemFreeAsync(block, stream) != CUDA_SUCCESS ||
          cuStreamSynchronize(stream) != CUDA_SUCCESS || cuMemPoolTrimTo(pool, 0) != CUDA_SUCCESS) {
        ++failed;
        continue;
      }
      ++served;
    }
    if (cuStreamDestroy(stream) != CUDA_SUCCESS || cuMemPoolDestroy(pool) != CUDA_SUCCESS) ++failed;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(run);
  for (std::thread& thread : threads) thread.join();
  running.store(false);
  watcher.join();
  EXPECT_LE(peak.load(), kBudget);
  EXPECT_GT(served.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_CU(cuMemFree(held));
}

// Without spilling, a request whose pool cannot stay within the limit is refused, and what the
// failed attempt took is given back.
TEST_F(PoolBudget, ARequestThatCannotFitLeavesNothingBehind) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr held = 0;
  ASSERT_CU(cuMemAlloc(&held, 200 * kMiB));
  CUdeviceptr block = 0;
  EXPECT_EQ(cuMemAllocAsync(&block, 100 * kMiB, stream), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_LE(device_used(), kBudget);
  EXPECT_LE(device_used(), 200 * kMiB + 2 * kMiB);
  EXPECT_CU(cuMemFree(held));
  EXPECT_CU(cuStreamDestroy(stream));
}

}  // namespace
