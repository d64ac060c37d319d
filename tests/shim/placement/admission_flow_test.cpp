// placement/admission_flow: the flow every allocation and free shares, over the real ledger and
// spill placement with fake tiers, fake pool queries and a fake tiered mode: a request that fits
// is the driver's, one over the budget spills (or, in off mode, is refused), the driver's own
// refusal spills too, tiered mode's room and refreshed pool figures admit what they can, and a
// free goes back where the allocation came from.
#include "placement/admission_flow.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <vector>

#include "admission_fakes.h"

namespace vramspill::placement {
namespace {

using core::KeySpace;
using core::Route;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr CUdeviceptr kDriverPointer = 0x7000000;

class AdmissionFlowTest : public AdmissionFlowFixture {
 protected:
  // AdmissionFlow::forget_what_went, the driver saying that only kDriverPointer went; the
  // addresses it was asked about go into `asked`.
  std::size_t forget_what_went(const std::vector<core::Allocation>& held,
                               AdmissionFlow::ContextEnd ended, std::vector<uint64_t>& asked) {
    return flow_.forget_what_went(held, ended, [&](uint64_t address) {
      asked.push_back(address);
      return address == kDriverPointer;
    });
  }

  // cuMemAlloc of `bytes`, the driver answering `driver_result` with kDriverPointer.
  CUresult allocate(uint64_t bytes, CUresult driver_result = CUDA_SUCCESS) {
    const SpillTarget target{.out = &pointer_, .bytes = bytes};
    return flow_.admit_and_allocate(0, Route::kMemAlloc, bytes, target, [&](Allocated& made) {
      ++driver_calls_;
      if (driver_result == CUDA_SUCCESS) {
        pointer_ = kDriverPointer;
        made.key = kDriverPointer;
      }
      return driver_result;
    });
  }

  // cuMemAllocFromPoolAsync of `bytes` from `pool`: each driver call grows the pool by the next of
  // `growths` (0 once they run out) and hands out the request, or answers `driver_result`.
  CUresult allocate_from(CUmemoryPool pool, uint64_t bytes, std::vector<uint64_t> growths,
                         CUresult driver_result = CUDA_SUCCESS) {
    const SpillTarget target{.out = &pointer_,
                             .bytes = bytes,
                             .stream_ordered = true,
                             .exportable_pool = pools_.exportable(pool)};
    std::size_t call = 0;
    return flow_.allocate_from_pool(Route::kMemAllocFromPoolAsync, 0, pool, bytes, target, [&] {
      ++driver_calls_;
      if (driver_result != CUDA_SUCCESS) return driver_result;
      PoolUsage& usage = pool_driver_.pools[pool];
      usage.reserved += call < growths.size() ? growths[call] : 0;
      usage.used += bytes;
      ++call;
      pointer_ = kDriverPointer;
      return CUDA_SUCCESS;
    });
  }
  // A pool of the device with `reserved` bytes, `used` of them handed out, as the ledger and the
  // driver both have it.
  CUmemoryPool pool_with(uint64_t reserved, uint64_t used) {
    const CUmemoryPool pool = fake_pool(1);
    pools_.track(0, pool);
    pool_queries_.reserved_bytes[pool] = reserved;
    pool_driver_.pools[pool] = PoolUsage{.reserved = reserved, .used = used};
    ledger_.set_pool_reserved(0, pool_key(pool), reserved);
    return pool;
  }

  CUresult free(CUdeviceptr pointer, CUresult driver_result = CUDA_SUCCESS) {
    return flow_.forget_then_free(pointer, KeySpace::kPointer, [&] {
      driver_frees_.push_back(pointer);
      return driver_result;
    });
  }

  CUdeviceptr pointer_ = 0;
  int driver_calls_ = 0;
  std::vector<CUdeviceptr> driver_frees_;
};

TEST_F(AdmissionFlowTest, ARequestThatFitsIsTheDriversAndRecorded) {
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 1);
  EXPECT_EQ(pointer_, kDriverPointer);
  EXPECT_EQ(recorded(ledger_, Route::kMemAlloc).live_bytes, 16 * kMiB);
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 16 * kMiB);
  EXPECT_TRUE(managed_.allocations.empty());
}

TEST_F(AdmissionFlowTest, ARequestOverTheBudgetSpillsWithoutTheDriver) {
  ASSERT_EQ(allocate(96 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 0);
  EXPECT_EQ(pointer_, 0x100000000u);
  EXPECT_EQ(recorded(ledger_, Route::kSpillManaged).live_bytes, 96 * kMiB);
  EXPECT_EQ(recorded(ledger_, Route::kMemAlloc).live_bytes, 0u);
  EXPECT_EQ(ledger_.snapshot(0).over_budget, 1u);
  EXPECT_EQ(ledger_.snapshot(0).refused(), 0u) << "served by the spill";
}

TEST_F(AdmissionFlowTest, OffModeRefusesWhatDoesNotFit) {
  config_.mode = SpillMode::kOff;
  EXPECT_EQ(allocate(96 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(driver_calls_, 0);
  EXPECT_TRUE(managed_.allocations.empty());
  EXPECT_TRUE(host_.allocations.empty());
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 0u);
  EXPECT_EQ(ledger_.snapshot(0).refused(), 1u);
}

TEST_F(AdmissionFlowTest, ARouteThatNeverSpillsIsRefusedWithALogLine) {
  const CUresult result =
      flow_.admit_and_allocate(0, Route::kArray, 96 * kMiB, SpillTarget{}, [&](Allocated&) {
        ++driver_calls_;
        return CUDA_SUCCESS;
      });
  EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(driver_calls_, 0);
  EXPECT_NE(log_.text().find("refused"), std::string::npos) << log_.text();
}

TEST_F(AdmissionFlowTest, TheDriversOwnRefusalSpillsAndCancelsTheReservation) {
  ASSERT_EQ(allocate(16 * kMiB, CUDA_ERROR_OUT_OF_MEMORY), CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 1);
  EXPECT_EQ(pointer_, 0x100000000u);
  EXPECT_EQ(recorded(ledger_, Route::kSpillManaged).live_bytes, 16 * kMiB);
  EXPECT_EQ(recorded(ledger_, Route::kMemAlloc).live_bytes, 0u);
}

TEST_F(AdmissionFlowTest, ADriverErrorOtherThanOutOfMemoryIsTheProgramsAndSpillsNothing) {
  EXPECT_EQ(allocate(16 * kMiB, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(managed_.allocations.empty());
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 0u) << "the reservation was given back";
}

TEST_F(AdmissionFlowTest, TieredModeAdmitsWithTheRoomItsArenaMakes) {
  config_.mode = SpillMode::kTiered;
  tiered_.hold(64 * kMiB);
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(tiered_.room_requests, 1);
  EXPECT_EQ(driver_calls_, 1);
  EXPECT_EQ(recorded(ledger_, Route::kMemAlloc).live_bytes, 16 * kMiB);
  EXPECT_EQ(ledger_.snapshot(0).over_budget_served, 1u);
}

TEST_F(AdmissionFlowTest, OnlyTieredModeAsksItsArenaForRoom) {
  tiered_.hold(64 * kMiB);
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(tiered_.room_requests, 0);
  EXPECT_EQ(driver_calls_, 0) << "spilled";
}

TEST_F(AdmissionFlowTest, PoolFiguresAreReadAgainBeforeARefusal) {
  const CUmemoryPool pool = fake_pool(1);
  pools_.track(0, pool);
  ledger_.set_pool_reserved(0, reinterpret_cast<uint64_t>(pool), 64 * kMiB);
  pool_queries_.reserved_bytes[pool] = 0;  // given back at a synchronisation the shim missed
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 1) << "the stale figure would have spilled it";
}

TEST_F(AdmissionFlowTest, AFreeGoesBackWhereTheAllocationCameFrom) {
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(allocate(96 * kMiB), CUDA_SUCCESS);  // spilled
  const CUdeviceptr spilled = pointer_;
  ledger_.on_allocated(ledger_.admit(0, Route::kTiered, 8 * kMiB), 0x9000000, 8 * kMiB);

  ASSERT_EQ(free(kDriverPointer), CUDA_SUCCESS);
  ASSERT_EQ(free(spilled), CUDA_SUCCESS);
  ASSERT_EQ(free(0x9000000), CUDA_SUCCESS);
  ASSERT_EQ(free(0x1234000), CUDA_SUCCESS);  // never recorded: the driver's
  EXPECT_EQ(driver_frees_, (std::vector<CUdeviceptr>{kDriverPointer, 0x1234000}));
  EXPECT_EQ(managed_.frees, std::vector<CUdeviceptr>{spilled});
  EXPECT_EQ(tiered_.freed, std::vector<CUdeviceptr>{0x9000000});
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 0u);
}

TEST_F(AdmissionFlowTest, AFreeTheDriverRefusesLeavesTheAllocationLive) {
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(free(kDriverPointer, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(recorded(ledger_, Route::kMemAlloc).live_bytes, 16 * kMiB);
  EXPECT_TRUE(ledger_.find(kDriverPointer).has_value());
}

TEST_F(AdmissionFlowTest, AFreedStreamOrderedBlockRefreshesThePoolFigures) {
  const CUmemoryPool pool = fake_pool(1);
  pools_.track(0, pool);
  pool_queries_.reserved_bytes[pool] = 32 * kMiB;
  ledger_.set_pool_reserved(0, reinterpret_cast<uint64_t>(pool), 32 * kMiB);
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAllocAsync, 4 * kMiB), 0x8000000, 4 * kMiB);
  pool_queries_.reserved_bytes[pool] = 0;
  ASSERT_EQ(free(0x8000000), CUDA_SUCCESS);
  EXPECT_EQ(ledger_.snapshot(0).pool_reserved_bytes, 0u);
}

// Note [Resetting the device]: after a reset, what the driver no longer knows, the spills their
// tiers call lost and tiered blocks leave the budget with no call to free them; what the driver
// still knows, a spill its tier kept and VMM handles stay.
TEST_F(AdmissionFlowTest, AResetForgetsWhatWentWithTheContextAndFreesNothing) {
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);  // the driver's, freed by the reset
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 8 * kMiB), 0x7800000, 8 * kMiB);
  ASSERT_EQ(allocate(96 * kMiB), CUDA_SUCCESS);  // spilled, lost
  const CUdeviceptr lost_spill = pointer_;
  ASSERT_EQ(allocate(96 * kMiB), CUDA_SUCCESS);  // spilled, kept by its tier
  managed_.kept_in_reset.push_back(pointer_);
  ledger_.on_allocated(ledger_.admit(0, Route::kTiered, 4 * kMiB), 0x9000000, 4 * kMiB);
  ledger_.on_allocated(ledger_.admit(0, Route::kMemCreate, 2 * kMiB), 0x5000, 2 * kMiB);
  const std::vector<core::Allocation> held = ledger_.all_of(0);
  ASSERT_EQ(held.size(), 6u);
  const uint64_t held_bytes = ledger_.snapshot(0).held_bytes;

  std::vector<uint64_t> asked;
  const std::size_t gone = forget_what_went(held, AdmissionFlow::ContextEnd::kPrimaryReset, asked);
  EXPECT_EQ(gone, 3u);
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<uint64_t>{0x7000000, 0x7800000}))
      << "only the driver's own allocations are asked about";
  EXPECT_TRUE(driver_frees_.empty());
  EXPECT_TRUE(managed_.frees.empty());
  EXPECT_TRUE(tiered_.freed.empty());
  EXPECT_EQ(tiered_.lost, std::vector<CUdeviceptr>{0x9000000});
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, held_bytes - 16 * kMiB)
      << "neither a spill nor a tiered block holds VRAM of its own (the arena's granules do)";
  EXPECT_FALSE(ledger_.find(kDriverPointer).has_value());
  EXPECT_TRUE(ledger_.find(0x7800000).has_value());
  EXPECT_FALSE(ledger_.find(lost_spill).has_value());
  EXPECT_TRUE(ledger_.find(managed_.kept_in_reset[0]).has_value());
  EXPECT_FALSE(ledger_.find(0x9000000).has_value());
  EXPECT_TRUE(ledger_.find(0x5000, KeySpace::kVmmHandle).has_value());
  EXPECT_EQ(recorded(ledger_, Route::kSpillManaged).live_bytes, 96 * kMiB);
}

// Note [A created context's end]: a context the program created takes with it what the driver
// no longer knows, and spills their tiers call lost; host-pool spills and tiered blocks, which the
// shim made in primary contexts, stay, unasked.
TEST_F(AdmissionFlowTest, ACreatedContextsEndLeavesThePoolsSpillsAndTieredBlocks) {
  ASSERT_EQ(allocate(16 * kMiB), CUDA_SUCCESS);  // the driver's, freed with the context
  ASSERT_EQ(allocate(96 * kMiB), CUDA_SUCCESS);  // spilled to managed memory, lost
  const CUdeviceptr lost_spill = pointer_;
  ledger_.on_allocated(ledger_.admit(0, Route::kSpillHost, 4 * kMiB), 0xa000000, 4 * kMiB);
  ledger_.on_allocated(ledger_.admit(0, Route::kTiered, 4 * kMiB), 0x9000000, 4 * kMiB);
  const std::vector<core::Allocation> held = ledger_.all_of(0);
  ASSERT_EQ(held.size(), 4u);

  std::vector<uint64_t> asked;
  const std::size_t gone =
      forget_what_went(held, AdmissionFlow::ContextEnd::kCreatedDestroyed, asked);
  EXPECT_EQ(gone, 2u);
  EXPECT_EQ(asked, std::vector<uint64_t>{kDriverPointer});
  EXPECT_FALSE(ledger_.find(kDriverPointer).has_value());
  EXPECT_FALSE(ledger_.find(lost_spill).has_value());
  EXPECT_TRUE(ledger_.find(0xa000000).has_value()) << "the pool's spill went";
  EXPECT_TRUE(ledger_.find(0x9000000).has_value()) << "the tiered block went";
  EXPECT_TRUE(tiered_.lost.empty());
}

TEST_F(AdmissionFlowTest, ACuMemCreateThatDoesNotFitIsMadeHostLocated) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  const VmmSpillRequest request{.device = 0, .bytes = 96 * kMiB, .prop = &prop, .flags = 0};
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result = flow_.admit_and_allocate(
      0, Route::kMemCreate, 96 * kMiB, SpillTarget{.vmm = &request, .handle_out = &handle},
      [&](Allocated&) {
        ++driver_calls_;
        return CUDA_SUCCESS;
      });
  ASSERT_EQ(result, CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 0);
  EXPECT_EQ(handle, 0x5000u);
  EXPECT_EQ(recorded(ledger_, Route::kSpillVmmHost).live_bytes, 96 * kMiB);
}

// Stream-ordered requests (AdmissionFlow::allocate_from_pool, Note [Stream-ordered pools in the
// budget] in core/ledger.h). The budget is 64 MiB.

TEST_F(AdmissionFlowTest, ARequestThePoolsUnusedReserveHoldsCostsTheBudgetNothing) {
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 40 * kMiB), 0x9000000, 40 * kMiB);
  const CUmemoryPool pool = pool_with(24 * kMiB, 8 * kMiB);
  ASSERT_EQ(allocate_from(pool, 16 * kMiB, {}), CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 1);
  EXPECT_EQ(recorded(ledger_, Route::kMemAllocFromPoolAsync).live_bytes, 16 * kMiB);
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 64 * kMiB);
}

TEST_F(AdmissionFlowTest, AGrowthTheBudgetHoldsReplacesTheReservedChunk) {
  const CUmemoryPool pool = pool_with(0, 0);
  ASSERT_EQ(allocate_from(pool, 4 * kMiB, {32 * kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 32 * kMiB) << "the growth, not growth + chunk";
  EXPECT_EQ(ledger_.snapshot(0).pool_reserved_bytes, 32 * kMiB);
  EXPECT_TRUE(pool_driver_.given_back.empty());
}

TEST_F(AdmissionFlowTest, AChunkTheBudgetCannotHoldSpillsBeforeTheDriverIsAsked) {
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 40 * kMiB), 0x9000000, 40 * kMiB);
  const CUmemoryPool pool = pool_with(0, 0);
  ASSERT_EQ(allocate_from(pool, 4 * kMiB, {}), CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 0) << "4 MiB fit, the 32 MiB chunk does not";
  ASSERT_EQ(managed_.allocations.size(), 1u);
  EXPECT_EQ(pointer_, 0x100000000u);
}

TEST_F(AdmissionFlowTest, ARequestOfAnExportablePoolOverTheBudgetIsRefusedNotSpilled) {
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 40 * kMiB), 0x9000000, 40 * kMiB);
  const CUmemoryPool pool = pool_with(0, 0);
  CUmemPoolProps exportable = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  exportable.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  pools_.created(pool, exportable);
  EXPECT_EQ(allocate_from(pool, 4 * kMiB, {}), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(driver_calls_, 0);
  EXPECT_TRUE(managed_.allocations.empty()) << "another process may import the pool's memory";
  EXPECT_NE(log_.text().find("not spilled: its pool's memory may be imported by another process"),
            std::string::npos)
      << log_.text();
}

TEST_F(AdmissionFlowTest, ACappedPoolIsChargedTheGrowthItsCapAllows) {
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 40 * kMiB), 0x9000000, 40 * kMiB);
  const CUmemoryPool pool = pool_with(0, 0);
  CUmemPoolProps capped = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  capped.maxSize = 16 * kMiB;
  pools_.created(pool, capped);
  ASSERT_EQ(allocate_from(pool, 4 * kMiB, {4 * kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(driver_calls_, 1) << "charged 4 MiB, not the chunk the cap cannot hold";
  EXPECT_TRUE(managed_.allocations.empty());
}

TEST_F(AdmissionFlowTest, AGrowthPastTheBudgetIsGivenBackAndTheRequestSpills) {
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 20 * kMiB), 0x9000000, 20 * kMiB);
  const CUmemoryPool pool = pool_with(0, 0);
  ASSERT_EQ(allocate_from(pool, 8 * kMiB, {48 * kMiB}), CUDA_SUCCESS);  // a fragmented reserve
  EXPECT_EQ(pool_driver_.given_back, std::vector<CUdeviceptr>{kDriverPointer});
  EXPECT_EQ(driver_calls_, 1) << "trimming freed nothing the pool had before: no second try";
  ASSERT_EQ(managed_.allocations.size(), 1u);
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 20 * kMiB);
  EXPECT_EQ(ledger_.snapshot(0).pool_reserved_bytes, 0u);
}

// Note [Waiting outside the pool's lock]: another request on a pool that shares the lock goes
// on while the stream is waited for, and the books meanwhile hold the pool's grown reserve.
TEST_F(AdmissionFlowTest, TheWaitBeforeATrimHoldsNoPoolsLock) {
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 20 * kMiB), 0x9000000, 20 * kMiB);
  const CUmemoryPool pool = pool_with(0, 0);
  std::future<void> other_request;  // outlives the exchange, which may hold the lock it wants
  bool other_request_went_on = false;
  uint64_t reserve_while_waiting = 0;
  pool_driver_.while_waiting = [&] {
    reserve_while_waiting = ledger_.snapshot(0).pool_reserved_bytes;
    other_request = std::async(std::launch::async, [&] { (void)pools_.lock(pool); });
    other_request_went_on =
        other_request.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  };
  ASSERT_EQ(allocate_from(pool, 8 * kMiB, {48 * kMiB}), CUDA_SUCCESS);
  EXPECT_TRUE(other_request_went_on);
  EXPECT_EQ(reserve_while_waiting, 48 * kMiB) << "the device holds it until the trim";
  EXPECT_EQ(ledger_.snapshot(0).pool_reserved_bytes, 0u) << "the trim's figure, read after it";
}

TEST_F(AdmissionFlowTest, ATrimThatFreedTheReserveIsTriedOnceMore) {
  const CUmemoryPool pool = pool_with(30 * kMiB, 10 * kMiB);
  pool_driver_.used_after_give_back[pool] = 10 * kMiB;
  ASSERT_EQ(allocate_from(pool, 24 * kMiB, {40 * kMiB, 32 * kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(pool_driver_.given_back.size(), 1u);
  EXPECT_EQ(driver_calls_, 2);
  EXPECT_TRUE(managed_.allocations.empty());
  EXPECT_EQ(ledger_.snapshot(0).pool_reserved_bytes, 42 * kMiB);
}

TEST_F(AdmissionFlowTest, AGrowthThatCannotBeGivenBackIsKept) {
  const CUmemoryPool pool = pool_with(0, 0);
  ledger_.on_allocated(ledger_.admit(0, Route::kMemAlloc, 20 * kMiB), 0x9000000, 20 * kMiB);
  pool_driver_.give_back_result = false;  // a capturing stream, say
  ASSERT_EQ(allocate_from(pool, 8 * kMiB, {48 * kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(pointer_, kDriverPointer) << "the block stays the program's";
  EXPECT_EQ(ledger_.snapshot(0).pool_reserved_bytes, 48 * kMiB);
}

TEST_F(AdmissionFlowTest, TieredModeMakesRoomOnceForThePoolsGrowth) {
  config_.mode = SpillMode::kTiered;
  tiered_.hold(48 * kMiB);
  const CUmemoryPool pool = pool_with(0, 0);
  ASSERT_EQ(allocate_from(pool, 4 * kMiB, {32 * kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(tiered_.room_requests, 1);
  EXPECT_EQ(driver_calls_, 1);
  EXPECT_EQ(ledger_.snapshot(0).over_budget_served, 1u);
  EXPECT_TRUE(managed_.allocations.empty());
}

// The pool's unused reserve should have held the request, but the pool grew past the budget all
// the same (its reserve fragmented): tiered mode is asked for the chunk's room, not for none.
TEST_F(AdmissionFlowTest, TieredModeMakesRoomForAGrowthTheReserveShouldHaveSpared) {
  config_.mode = SpillMode::kTiered;
  const CUmemoryPool pool = pool_with(32 * kMiB, 24 * kMiB);
  pool_driver_.used_after_give_back[pool] = 32 * kMiB;  // trimming frees nothing
  tiered_.hold(32 * kMiB);
  ASSERT_EQ(allocate_from(pool, 8 * kMiB, {32 * kMiB, 32 * kMiB}), CUDA_SUCCESS);
  EXPECT_EQ(pool_driver_.given_back.size(), 1u);
  EXPECT_EQ(driver_calls_, 2) << "served after tiered mode made room for the chunk";
  EXPECT_TRUE(managed_.allocations.empty());
}

TEST_F(AdmissionFlowTest, APoolRequestTheDriverRefusesForWantOfMemorySpills) {
  const CUmemoryPool pool = pool_with(0, 0);
  ASSERT_EQ(allocate_from(pool, 4 * kMiB, {}, CUDA_ERROR_OUT_OF_MEMORY), CUDA_SUCCESS);
  ASSERT_EQ(managed_.allocations.size(), 1u);
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 0u) << "the reserved chunk was given back";
  EXPECT_EQ(allocate_from(pool, 4 * kMiB, {}, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace vramspill::placement
