// The budget ledger, driven directly (no driver, no preloading): admission against the limit,
// the reservation protocol under threads, pools, frees, cuMemGetInfo's view and the texts.
#include "core/ledger.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace vramspill::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// Admits and, when admitted, records the allocation under `key`; returns whether it fitted.
bool allocate(Ledger& ledger, int device, Route route, uint64_t key, uint64_t bytes) {
  const Admission admission = ledger.admit(device, route, bytes);
  if (admission.admitted) ledger.on_allocated(admission, key, bytes);
  return admission.admitted;
}

TEST(LedgerAdmission, AdmitsBelowAndAtTheLimitAndRefusesAbove) {
  Ledger ledger;
  ledger.set_device(0, 8 * kGiB, 1000);
  EXPECT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x1000, 600));
  EXPECT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x2000, 400));  // exactly at the limit
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 1000u);

  const Admission over = ledger.admit(0, Route::kMemAlloc, 1);
  EXPECT_FALSE(over.admitted);
  EXPECT_EQ(over.reserved_bytes, 0u);
  EXPECT_FALSE(over.refusal.empty());
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 1000u);
  EXPECT_EQ(ledger.snapshot(0).over_budget, 1u);

  ASSERT_TRUE(ledger.on_freed(0x2000).has_value());
  EXPECT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x3000, 400));
  EXPECT_EQ(ledger.internal_errors(), 0u);
}

TEST(LedgerAdmission, RefusesARequestLargerThanTheWholeLimit) {
  Ledger ledger;
  ledger.set_device(0, 8 * kGiB, kGiB);
  EXPECT_FALSE(ledger.admit(0, Route::kMemAlloc, kGiB + 1).admitted);
  EXPECT_FALSE(ledger.admit(0, Route::kMemAlloc, UINT64_MAX).admitted);  // no wrap-around
  EXPECT_TRUE(ledger.admit(0, Route::kMemAlloc, kGiB).admitted);
}

TEST(LedgerAdmission, CancelGivesTheReservationBack) {
  Ledger ledger;
  ledger.set_device(0, kGiB, 100);
  const Admission first = ledger.admit(0, Route::kMemAlloc, 100);
  ASSERT_TRUE(first.admitted);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 100u);  // reserved while the driver works
  EXPECT_FALSE(ledger.admit(0, Route::kMemAlloc, 1).admitted);
  ledger.cancel(first);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
  EXPECT_TRUE(ledger.admit(0, Route::kMemAlloc, 100).admitted);
}

TEST(LedgerAdmission, SettlingTwiceClampsAtZeroAndCountsAnInternalError) {
  Ledger ledger;
  ledger.set_device(0, kGiB, kGiB);
  const Admission admission = ledger.admit(0, Route::kMemAlloc, 100);
  ledger.cancel(admission);
  ledger.cancel(admission);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
  EXPECT_EQ(ledger.internal_errors(), 1u);
}

TEST(LedgerAdmission, PitchAllocationsCountWhatTheDriverReallyTook) {
  Ledger ledger;
  ledger.set_device(0, kGiB, 10000);
  const Admission admission = ledger.admit(0, Route::kMemAllocPitch, 1000);  // width x height
  ledger.on_allocated(admission, 0x1000, 1024);                              // pitch x height
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 1024u);
  ASSERT_TRUE(ledger.on_freed(0x1000).has_value());
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
}

TEST(LedgerAdmission, UnconfiguredDevicesAreCountedButUnlimited) {
  Ledger ledger;
  EXPECT_TRUE(allocate(ledger, 3, Route::kMemAllocManaged, 0x1000, 1000 * kGiB));
  const DeviceSnapshot d = ledger.snapshot(3);
  EXPECT_FALSE(d.configured);
  EXPECT_EQ(d.held_bytes, 1000 * kGiB);
  EXPECT_EQ(ledger.devices(), std::vector<int>{3});
}

TEST(LedgerAdmission, OutOfRangeDevicesFailOpen) {
  Ledger ledger;
  const Admission admission = ledger.admit(kMaxDevices, Route::kMemAlloc, kGiB);
  EXPECT_TRUE(admission.admitted);
  ledger.on_allocated(admission, 0x1000, kGiB);
  EXPECT_FALSE(ledger.on_freed(0x1000).has_value());  // never recorded
  EXPECT_GT(ledger.internal_errors(), 0u);
  EXPECT_TRUE(ledger.admit(-1, Route::kMemAlloc, kGiB).admitted);
}

TEST(LedgerAdmission, ANullKeyIsNotRecordedAndGivesItsReservationBack) {
  Ledger ledger;
  ledger.set_device(0, kGiB, kGiB);
  const Admission admission = ledger.admit(0, Route::kMemAlloc, 100);
  ledger.on_allocated(admission, 0, 100);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
  EXPECT_EQ(ledger.internal_errors(), 1u);
}

// The hooks may keep the ledger in static storage without running code when the shim is loaded
// (Note [Entering the shim] in hooks/shim_state.h): it must be constant-initialisable.
constinit Ledger constant_initialised_ledger;

TEST(LedgerAdmission, IsConstantInitialisable) {
  EXPECT_TRUE(constant_initialised_ledger.admit(0, Route::kMemAlloc, 1).admitted);
}

// Note [Reservation protocol]: eight threads race admissions near the limit, some of which the
// "driver" fails. The bytes the threads hold at any moment, tracked by the test itself, must
// never exceed the limit, and the books must balance at the end.
TEST(LedgerConcurrency, ReservationsNeverExceedTheLimit) {
  constexpr uint64_t kLimit = 64 * kMiB;
  constexpr int kThreads = 8;
  constexpr int kIterations = 20000;
  Ledger ledger;
  ledger.set_device(0, kGiB, kLimit);
  std::atomic<uint64_t> outstanding{0};
  std::atomic<uint64_t> max_outstanding{0};
  std::atomic<uint64_t> admitted{0};
  std::atomic<uint64_t> refused{0};
  const auto raise_max = [&](uint64_t value) {
    uint64_t seen = max_outstanding.load();
    while (value > seen && !max_outstanding.compare_exchange_weak(seen, value)) {
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 random(static_cast<uint64_t>(t) + 1);
      std::vector<std::pair<uint64_t, uint64_t>> live;  // key, bytes
      live.reserve(kIterations);
      uint64_t next_key = (static_cast<uint64_t>(t) + 1) << 40;
      for (int i = 0; i < kIterations; ++i) {
        const uint64_t bytes = (random() % 8 + 1) * kMiB;
        const Admission admission = ledger.admit(0, Route::kMemAlloc, bytes);
        if (!admission.admitted) {
          refused.fetch_add(1);
        } else {
          admitted.fetch_add(1);
          raise_max(outstanding.fetch_add(bytes) + bytes);
          if (random() % 8 == 0) {  // the driver failed
            outstanding.fetch_sub(bytes);
            ledger.cancel(admission);
          } else {
            next_key += 256;
            ledger.on_allocated(admission, next_key, bytes);
            live.emplace_back(next_key, bytes);
          }
        }
        if (!live.empty() && (random() % 2 == 0 || !admission.admitted)) {
          const auto [key, size] = live[random() % live.size()];
          std::erase(live, std::pair{key, size});
          outstanding.fetch_sub(size);  // before on_freed: the ledger frees first, too
          ASSERT_TRUE(ledger.on_freed(key).has_value());
        }
        if (i % 1024 == 0) {
          ASSERT_LE(ledger.snapshot(0).held_bytes, kLimit);
        }
      }
      for (const auto& [key, size] : live) {
        outstanding.fetch_sub(size);
        ASSERT_TRUE(ledger.on_freed(key).has_value());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_LE(max_outstanding.load(), kLimit);
  EXPECT_GT(refused.load(), 0u) << "the test must actually contend for the limit";
  const DeviceSnapshot d = ledger.snapshot(0);
  EXPECT_EQ(d.held_bytes, 0u);
  EXPECT_LE(d.peak_bytes, kLimit);
  EXPECT_EQ(d.routes[route_index(Route::kMemAlloc)].live_bytes, 0u);
  EXPECT_EQ(d.routes[route_index(Route::kMemAlloc)].live_count, 0u);
  EXPECT_EQ(d.over_budget, refused.load());
  EXPECT_EQ(ledger.internal_errors(), 0u);
  EXPECT_EQ(ledger.missed_frees(), 0u);
}

TEST(LedgerPools, PoolsCountWhatTheyReserveNotWhatTheyHandOut) {
  Ledger ledger;
  ledger.set_device(0, kGiB, 120 * kMiB);
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x1000, 50 * kMiB));
  ledger.set_pool_reserved(0, /*pool_key=*/0xb001, 32 * kMiB);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 82 * kMiB);

  // Fits in the pool's unused reserve: no new device memory, admitted without a reservation.
  const Admission inside = ledger.admit(0, Route::kMemAllocAsync, 24 * kMiB, 32 * kMiB);
  ASSERT_TRUE(inside.admitted);
  EXPECT_EQ(inside.reserved_bytes, 0u);
  ledger.on_allocated(inside, 0x100000, 24 * kMiB);
  DeviceSnapshot d = ledger.snapshot(0);
  EXPECT_EQ(d.held_bytes, 82 * kMiB);
  EXPECT_EQ(d.routes[route_index(Route::kMemAllocAsync)].live_bytes, 24 * kMiB);

  // Larger than the pool's 8 MiB unused: the pool grows by a chunk of the request rounded up,
  // 48 MiB, and only 38 MiB are left under the limit.
  const Admission beyond = ledger.admit(0, Route::kMemAllocFromPoolAsync, 47 * kMiB, 8 * kMiB);
  EXPECT_FALSE(beyond.admitted);
  EXPECT_NE(beyond.refusal.find("48.0 MiB more"), std::string::npos) << beyond.refusal;

  // 24 MiB, also larger than the unused 8 MiB: the pool will grow by a whole 32 MiB chunk, which
  // is reserved before the driver call, and the growth the pool reports replaces it.
  const Admission grows = ledger.admit(0, Route::kMemAllocFromPoolAsync, 24 * kMiB, 8 * kMiB);
  ASSERT_TRUE(grows.admitted);
  EXPECT_EQ(grows.reserved_bytes, 32 * kMiB);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 114 * kMiB);
  Admission settled = grows;
  ASSERT_TRUE(ledger.settle_pool_growth(settled, 0xb001, 64 * kMiB));  // grew by the chunk
  ledger.on_allocated(settled, 0x200000, 24 * kMiB);
  d = ledger.snapshot(0);
  EXPECT_EQ(d.held_bytes, 114 * kMiB);  // within the limit all along
  EXPECT_EQ(d.pool_reserved_bytes, 64 * kMiB);
  EXPECT_EQ(d.peak_bytes, 114 * kMiB);

  // Freeing a block leaves the pool's reserve in place; trimming and destroying release it.
  const std::optional<Allocation> freed = ledger.on_freed(0x100000);
  ASSERT_TRUE(freed.has_value());
  EXPECT_EQ(freed->route, Route::kMemAllocAsync);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 114 * kMiB);
  ledger.set_pool_reserved(0, 0xb001, 32 * kMiB);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 82 * kMiB);
  ASSERT_TRUE(ledger.on_freed(0x200000).has_value());
  ledger.set_pool_reserved(0, 0xb001, 0);
  d = ledger.snapshot(0);
  EXPECT_EQ(d.held_bytes, 50 * kMiB);
  EXPECT_EQ(d.pool_reserved_bytes, 0u);
  EXPECT_EQ(d.routes[route_index(Route::kMemAllocAsync)].live_bytes, 0u);
  EXPECT_EQ(d.routes[route_index(Route::kMemAllocFromPoolAsync)].live_bytes, 0u);
  EXPECT_EQ(ledger.internal_errors(), 0u);
}

// The chunk reserved before the driver call is the whole chunk the pool takes: a request that
// would fit under the budget but whose chunk would not is refused before the pool can grow past
// it (Note [Stream-ordered pools in the budget]).
TEST(LedgerPools, AChunkThatWouldNotFitIsRefusedBeforeThePoolGrows) {
  Ledger ledger;
  ledger.set_device(0, kGiB, 100 * kMiB);
  ledger.set_pool_reserved(0, 0xb001, 80 * kMiB);
  const Admission small = ledger.admit(0, Route::kMemAllocAsync, 4 * kMiB, 0);
  EXPECT_FALSE(small.admitted);  // 4 MiB fit, the 32 MiB chunk does not
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 80 * kMiB);
  EXPECT_EQ(pool_growth(1), 32 * kMiB);
  EXPECT_EQ(pool_growth(32 * kMiB), 32 * kMiB);
  EXPECT_EQ(pool_growth(33 * kMiB), 34 * kMiB);
  EXPECT_EQ(pool_growth(UINT64_MAX), UINT64_MAX);
}

// A pool whose size cap (maxSize) leaves less than a chunk grows by the rounded request alone, as
// the driver's does: reserving the chunk would refuse what the budget has room for.
TEST(LedgerPools, ACappedPoolIsChargedTheGrowthItsCapAllows) {
  EXPECT_EQ(pool_growth(1, 24 * kMiB), 2 * kMiB);
  EXPECT_EQ(pool_growth(3 * kMiB, 40 * kMiB), 32 * kMiB) << "the cap leaves room for the chunk";
  EXPECT_EQ(pool_growth(33 * kMiB, 30 * kMiB), 34 * kMiB) << "the driver's to refuse";
  Ledger ledger;
  ledger.set_device(0, kGiB, 100 * kMiB);
  ledger.set_pool_reserved(0, 0xb001, 80 * kMiB);
  const Admission small = ledger.admit(0, Route::kMemAllocFromPoolAsync, 1 * kMiB, 0, 8 * kMiB);
  ASSERT_TRUE(small.admitted);
  EXPECT_EQ(small.reserved_bytes, 2 * kMiB);
  ledger.cancel(small);
}

TEST(LedgerPools, EachPoolHasItsOwnFigure) {
  Ledger ledger;
  ledger.set_device(0, kGiB, kGiB);
  ledger.set_device(1, kGiB, kGiB);
  ledger.set_pool_reserved(0, 0xa, 10 * kMiB);
  ledger.set_pool_reserved(0, 0xb, 20 * kMiB);
  ledger.set_pool_reserved(1, 0xc, 40 * kMiB);
  ledger.set_pool_reserved(0, 0xa, 12 * kMiB);  // replaces, does not add
  EXPECT_EQ(ledger.snapshot(0).pool_reserved_bytes, 32 * kMiB);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 32 * kMiB);
  EXPECT_EQ(ledger.snapshot(1).held_bytes, 40 * kMiB);
  ledger.set_pool_reserved(0, 0xa, 0);  // destroyed
  ledger.set_pool_reserved(0, 0xa, 0);  // twice: nothing left to forget
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 20 * kMiB);
  EXPECT_EQ(ledger.snapshot(0).peak_bytes, 32 * kMiB);
  EXPECT_EQ(ledger.internal_errors(), 0u);
}

TEST(LedgerFrees, UnknownKeysAndOtherKeySpacesAreNotFound) {
  Ledger ledger;
  ledger.set_device(0, kGiB, kGiB);
  EXPECT_FALSE(ledger.on_freed(0xdead000).has_value());
  EXPECT_FALSE(ledger.on_freed(0).has_value());
  // A VMM handle and a device pointer with the same value are different allocations.
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemCreate, 0x5e1c0000, 2 * kMiB));
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x5e1c0000, 4 * kMiB));
  const std::optional<Allocation> handle = ledger.on_freed(0x5e1c0000, KeySpace::kVmmHandle);
  ASSERT_TRUE(handle.has_value());
  EXPECT_EQ(handle->bytes, 2 * kMiB);
  EXPECT_EQ(handle->route, Route::kMemCreate);
  EXPECT_FALSE(ledger.on_freed(0x5e1c0000, KeySpace::kArray).has_value());
  const std::optional<Allocation> pointer = ledger.on_freed(0x5e1c0000);
  ASSERT_TRUE(pointer.has_value());
  EXPECT_EQ(pointer->bytes, 4 * kMiB);
  EXPECT_FALSE(ledger.on_freed(0x5e1c0000).has_value());
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
}

// Note [Reservation protocol]: a forgotten allocation's bytes stay held until the driver's free
// has returned, so nothing is admitted against memory the device still holds.
TEST(LedgerFrees, ForgottenBytesStayHeldUntilReleased) {
  Ledger ledger;
  ledger.set_device(0, 8 * kGiB, 1000);
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x1000, 800));
  const std::optional<Allocation> forgotten = ledger.forget(0x1000, KeySpace::kPointer);
  ASSERT_TRUE(forgotten.has_value());
  EXPECT_EQ(forgotten->bytes, 800u);
  EXPECT_FALSE(ledger.forget(0x1000, KeySpace::kPointer).has_value());  // gone from the table
  EXPECT_FALSE(ledger.admit(0, Route::kMemAlloc, 300).admitted);       // still held
  ledger.release_forgotten(*forgotten);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
  EXPECT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x2000, 300));
}

// The driver refused the free: the allocation is live again, freed later as usual.
TEST(LedgerFrees, AReinstatedAllocationIsLiveAgain) {
  Ledger ledger;
  ledger.set_device(0, 8 * kGiB, 1000);
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemCreate, 0x77, 500));
  const std::optional<Allocation> forgotten = ledger.forget(0x77, KeySpace::kVmmHandle);
  ASSERT_TRUE(forgotten.has_value());
  ledger.reinstate(*forgotten);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 500u);
  EXPECT_EQ(ledger.snapshot(0).routes[route_index(Route::kMemCreate)].live_count, 1u);
  ASSERT_TRUE(ledger.on_freed(0x77, KeySpace::kVmmHandle).has_value());
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
  EXPECT_EQ(ledger.internal_errors(), 0u);
}

// The keys the ledger tells as freed, in order.
class FreedKeys final : public MemoryEvents {
 public:
  std::vector<uint64_t> keys;
  void device_configured(int, uint64_t, uint64_t) noexcept override {}
  void allocated(const Allocation&) noexcept override {}
  void freed(const Allocation& allocation) noexcept override { keys.push_back(allocation.key); }
  void refused(int, Route, uint64_t) noexcept override {}
  void evicted(int, uint64_t, uint64_t) noexcept override {}
  void promoted(int, uint64_t, uint64_t) noexcept override {}
  void used(int, uint32_t, std::span<const uint64_t>) noexcept override {}
};

// A free the driver said failed, but which freed: the key handed out again before the entry came
// back is the live allocation's, and keeps its entry; the old one's bytes go, untold (the trace
// has the new allocation at that key already, and a free now would end it there).
TEST(LedgerFrees, AReinstatedEntryNeverReplacesTheKeysLiveAllocation) {
  Ledger ledger;
  FreedKeys told;
  ledger.set_events(&told);
  ledger.set_device(0, kGiB, kGiB);
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x1000, 100));
  const std::optional<Allocation> forgotten = ledger.forget(0x1000, KeySpace::kPointer);
  ASSERT_TRUE(forgotten.has_value());
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAllocManaged, 0x1000, 30));
  ledger.reinstate(*forgotten);
  EXPECT_EQ(ledger.missed_frees(), 1u);
  const DeviceSnapshot d = ledger.snapshot(0);
  EXPECT_EQ(d.held_bytes, 30u);
  EXPECT_EQ(d.routes[route_index(Route::kMemAllocManaged)].live_count, 1u);
  EXPECT_EQ(d.routes[route_index(Route::kMemAlloc)].live_count, 0u);
  EXPECT_TRUE(told.keys.empty());
  const std::optional<Allocation> freed = ledger.on_freed(0x1000);
  ASSERT_TRUE(freed.has_value());
  EXPECT_EQ(freed->route, Route::kMemAllocManaged);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
  EXPECT_EQ(told.keys, std::vector<uint64_t>{0x1000});
  ledger.set_events(nullptr);
}

TEST(LedgerFrees, AKeyHandedOutAgainReplacesTheStaleEntry) {
  Ledger ledger;
  ledger.set_device(0, kGiB, kGiB);
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x1000, 100));
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAllocManaged, 0x1000, 30));
  EXPECT_EQ(ledger.missed_frees(), 1u);
  DeviceSnapshot d = ledger.snapshot(0);
  EXPECT_EQ(d.held_bytes, 30u);
  EXPECT_EQ(d.routes[route_index(Route::kMemAlloc)].live_bytes, 0u);
  EXPECT_EQ(d.routes[route_index(Route::kMemAlloc)].live_count, 0u);
  ASSERT_TRUE(ledger.on_freed(0x1000).has_value());
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
}

TEST(LedgerMemInfo, ClampsToTheBudgetAndNeverUnderflows) {
  Ledger ledger;
  // Unconfigured: the driver's own figures.
  EXPECT_EQ(ledger.budget_view(0, 70 * kGiB, 80 * kGiB).free_bytes, 70 * kGiB);
  EXPECT_EQ(ledger.budget_view(0, 70 * kGiB, 80 * kGiB).total_bytes, 80 * kGiB);

  ledger.set_device(0, 80 * kGiB, 20 * kGiB);
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x1000, 5 * kGiB));
  MemInfo info = ledger.budget_view(0, 70 * kGiB, 80 * kGiB);
  EXPECT_EQ(info.total_bytes, 20 * kGiB);
  EXPECT_EQ(info.free_bytes, 15 * kGiB);
  // Other processes took most of the device: the driver's free is the smaller figure.
  info = ledger.budget_view(0, 3 * kGiB, 80 * kGiB);
  EXPECT_EQ(info.free_bytes, 3 * kGiB);
  // A smaller device than the budget: total is the device's.
  info = ledger.budget_view(0, 8 * kGiB, 10 * kGiB);
  EXPECT_EQ(info.total_bytes, 10 * kGiB);
  EXPECT_EQ(info.free_bytes, 8 * kGiB);

  // Over the limit (pitch rounding, pool chunks): free is zero, not a huge wrapped number.
  const Admission admission = ledger.admit(0, Route::kMemAllocPitch, 15 * kGiB);
  ledger.on_allocated(admission, 0x2000, 16 * kGiB);
  info = ledger.budget_view(0, 70 * kGiB, 80 * kGiB);
  EXPECT_EQ(info.free_bytes, 0u);
  EXPECT_EQ(info.total_bytes, 20 * kGiB);
}

TEST(LedgerText, RefusalNamesTheRoutesAndTheLargestHolders) {
  Ledger ledger;
  ledger.set_device(0, 80 * kGiB, 4 * kGiB);
  for (uint64_t i = 0; i < 8; ++i) {  // 8 x 128 MiB, none among the largest five
    ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x10000000 + i * 0x10000000, 128 * kMiB));
  }
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x7f0000000000, kGiB));
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAllocManaged, 0x7e0000000000, 768 * kMiB));
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemCreate, 0x5e1c0001, 512 * kMiB));
  ASSERT_TRUE(allocate(ledger, 0, Route::kArray, 0x55550000, 256 * kMiB));
  ASSERT_TRUE(allocate(ledger, 1, Route::kMemAlloc, 0x7d0000000000, 10 * kGiB));  // not device 0
  ledger.set_pool_reserved(0, 0xb001, 256 * kMiB);
  const Admission async = ledger.admit(0, Route::kMemAllocAsync, 200 * kMiB, 256 * kMiB);
  ledger.on_allocated(async, 0x7c0000000000, 200 * kMiB);
  // Held: 1 GiB + 1 GiB + 768 MiB + 512 MiB + 256 MiB + 256 MiB (pool) = 3.75 GiB.

  const Admission refused = ledger.admit(0, Route::kMemAlloc, 512 * kMiB);
  ASSERT_FALSE(refused.admitted);
  const std::string& text = refused.refusal;
  SCOPED_TRACE(text);
  const char* const kLargest =
      "Largest live allocations: 0x7f0000000000 1.0 GiB (cuMemAlloc), 0x7e0000000000 768.0 MiB "
      "(cuMemAllocManaged), handle 0x5e1c0001 512.0 MiB (cuMemCreate), array 0x55550000 256.0 MiB "
      "(cuArrayCreate), 0x7c0000000000 200.0 MiB (cuMemAllocAsync).";
  for (const char* expected :
       {"cuMemAlloc of 512.0 MiB (536870912 bytes) on device 0 refused",
        "budget is 4.0 GiB of 80.0 GiB", "3.8 GiB is held", "256.0 MiB is free",
        "cuMemAlloc 2.0 GiB in 9 allocations", "cuMemAllocManaged 768.0 MiB in 1 allocation",
        "cuMemCreate 512.0 MiB", "cuArrayCreate 256.0 MiB",
        "stream-ordered pools 256.0 MiB reserved (handed out: cuMemAllocAsync 200.0 MiB",
        kLargest}) {
    EXPECT_NE(text.find(expected), std::string::npos) << "missing: " << expected;
  }
  EXPECT_EQ(text.find("0x7d0000000000"), std::string::npos) << "device 1 is not device 0's holder";
  EXPECT_EQ(text.find('\n'), std::string::npos) << "one paragraph";
}

TEST(LedgerText, SummaryLineGivesPeaksRoutesAndRefusals) {
  Ledger ledger;
  EXPECT_EQ(ledger.summary_line(), "no device memory recorded");
  ledger.set_device(0, 80 * kGiB, 20 * kGiB);
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x1000, 3 * kGiB));
  ledger.set_pool_reserved(0, 0xb001, 205 * kMiB);
  const Admission async = ledger.admit(0, Route::kMemAllocAsync, 100 * kMiB, 205 * kMiB);
  ledger.on_allocated(async, 0x2000, 100 * kMiB);
  ASSERT_TRUE(ledger.on_freed(0x1000).has_value());
  ASSERT_TRUE(allocate(ledger, 0, Route::kMemAlloc, 0x3000, kGiB));
  EXPECT_FALSE(ledger.admit(0, Route::kMemAlloc, 30 * kGiB).admitted);
  EXPECT_FALSE(ledger.admit(0, Route::kMemAlloc, 40 * kGiB).admitted);
  ledger.note_over_budget_served(0);  // the second was spilled
  ASSERT_TRUE(allocate(ledger, 1, Route::kMemAllocManaged, 0x4000, 512 * kMiB));

  // "refused" is what failed with OUT_OF_MEMORY alone.
  EXPECT_EQ(ledger.snapshot(0).refused(), 1u);
  EXPECT_EQ(ledger.summary_line(),
            "device 0: peak 3.2 GiB of 20.0 GiB budget (cuMemAlloc 3.0 GiB, stream-ordered pools "
            "205.0 MiB); routes seen: cuMemAlloc x2, cuMemAllocAsync x1; 2 over the budget, 1 "
            "refused | device 1: peak 512.0 MiB, no budget (cuMemAllocManaged 512.0 MiB); routes "
            "seen: cuMemAllocManaged x1; 0 over the budget, 0 refused");
}

}  // namespace
}  // namespace vramspill::core
