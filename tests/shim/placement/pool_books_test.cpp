// placement/pool_books over fake pool queries: where each pool's memory is, which pools tiered
// mode may serve, and the figures the ledger is given for them (Note [Refreshing pool figures],
// Note [A pool figure the driver does not give]).
#include "placement/pool_books.h"

#include <gtest/gtest.h>

#include "pool_fakes.h"

namespace vramspill::placement {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

class PoolBooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ledger_.set_device(0, 1024 * kMiB, 512 * kMiB);
    ledger_.set_device(1, 1024 * kMiB, 512 * kMiB);
  }

  uint64_t pool_bytes(int device) const { return ledger_.snapshot(device).pool_reserved_bytes; }

  FakePoolQueries queries_;
  PoolBooks books_{queries_};
  core::Ledger ledger_;
};

TEST_F(PoolBooksTest, ACreatedPoolIsPlacedWhereItsPropertiesSay) {
  books_.created(fake_pool(1), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 1));
  books_.created(fake_pool(2), pool_props(CU_MEM_LOCATION_TYPE_HOST, 0));
  EXPECT_EQ(books_.device_of(fake_pool(1)), 1);
  EXPECT_EQ(books_.device_of(fake_pool(2)), kHostLocatedPool);
  EXPECT_EQ(books_.device_of(fake_pool(3)), std::nullopt) << "neither created nor a default pool";
}

TEST_F(PoolBooksTest, ADefaultPoolIsFoundThroughTheDriverAndRemembered) {
  queries_.devices = 2;
  queries_.default_pools = {{0, fake_pool(10)}, {1, fake_pool(11)}};
  EXPECT_EQ(books_.device_of(fake_pool(11)), 1);
  queries_.default_pools.clear();  // remembered: the driver is not asked again
  EXPECT_EQ(books_.device_of(fake_pool(11)), 1);
  EXPECT_EQ(books_.device_of(nullptr), std::nullopt);
}

TEST_F(PoolBooksTest, OnlyDefaultPoolsAndPlainCreatedOnesArePlain) {
  queries_.default_pools = {{0, fake_pool(10)}};
  CUmemPoolProps exported = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  exported.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemPoolProps capped = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  capped.maxSize = 64 * kMiB;
  books_.created(fake_pool(1), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  books_.created(fake_pool(2), exported);
  books_.created(fake_pool(3), capped);
  books_.created(fake_pool(4), pool_props(CU_MEM_LOCATION_TYPE_HOST, 0));
  // CUDA 13's managed pools: the program may touch their memory from the host, which an arena
  // block of tiered mode is not.
  CUmemPoolProps managed = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  managed.allocType = CU_MEM_ALLOCATION_TYPE_MANAGED;
  books_.created(fake_pool(6), managed);
  EXPECT_TRUE(books_.plain(0, fake_pool(10)));
  EXPECT_TRUE(books_.plain(0, fake_pool(1)));
  EXPECT_FALSE(books_.plain(0, fake_pool(2)));
  EXPECT_FALSE(books_.plain(0, fake_pool(3)));
  EXPECT_FALSE(books_.plain(0, fake_pool(4)));
  EXPECT_FALSE(books_.plain(0, fake_pool(6)));
  EXPECT_FALSE(books_.plain(0, fake_pool(5))) << "unknown";
  EXPECT_FALSE(books_.plain(1, nullptr)) << "a device whose default pool the driver does not give";
}

TEST_F(PoolBooksTest, ACreatedPoolsSizeCapIsRemembered) {
  queries_.default_pools = {{0, fake_pool(10)}};
  CUmemPoolProps capped = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  capped.maxSize = 24 * kMiB;
  books_.created(fake_pool(1), capped);
  books_.created(fake_pool(2), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  EXPECT_EQ(books_.size_cap(fake_pool(1)), 24 * kMiB);
  EXPECT_EQ(books_.size_cap(fake_pool(2)), 0u);
  EXPECT_EQ(books_.size_cap(fake_pool(10)), 0u) << "a default pool has none";
  EXPECT_EQ(books_.size_cap(fake_pool(3)), 0u) << "unknown";
}

TEST_F(PoolBooksTest, ARefreshGivesTheLedgerEachDevicePoolsFigure) {
  books_.track(0, fake_pool(1));
  books_.track(1, fake_pool(2));
  books_.track(kHostLocatedPool, fake_pool(3));
  queries_.reserved_bytes = {
      {fake_pool(1), 32 * kMiB}, {fake_pool(2), 64 * kMiB}, {fake_pool(3), 128 * kMiB}};
  books_.refresh(ledger_);
  EXPECT_EQ(pool_bytes(0), 32 * kMiB);
  EXPECT_EQ(pool_bytes(1), 64 * kMiB);
  EXPECT_EQ(queries_.reserved_queries, 2) << "a host-located pool takes no device memory";

  queries_.reserved_bytes[fake_pool(1)] = 0;  // given back at a synchronisation
  books_.refresh(ledger_);
  EXPECT_EQ(pool_bytes(0), 0u);
}

TEST_F(PoolBooksTest, ARefreshKeepsAFigureTheDriverDoesNotGive) {
  books_.track(0, fake_pool(1));
  ledger_.set_pool_reserved(0, reinterpret_cast<uint64_t>(fake_pool(1)), 32 * kMiB);
  books_.refresh(ledger_);  // the query fails
  EXPECT_EQ(pool_bytes(0), 32 * kMiB);
}

TEST_F(PoolBooksTest, ARefreshSkipsAPoolInTheMiddleOfAnExchange) {
  books_.track(0, fake_pool(1));
  queries_.reserved_bytes = {{fake_pool(1), 32 * kMiB}};
  {
    const auto held = books_.lock(fake_pool(1));
    books_.refresh(ledger_);
    EXPECT_EQ(pool_bytes(0), 0u) << "the exchange settles this pool's figure itself";
  }
  books_.refresh(ledger_);
  EXPECT_EQ(pool_bytes(0), 32 * kMiB);
}

TEST_F(PoolBooksTest, ADestroyedPoolLeavesTheBudget) {
  books_.created(fake_pool(1), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  ledger_.set_pool_reserved(0, reinterpret_cast<uint64_t>(fake_pool(1)), 32 * kMiB);
  books_.destroyed(ledger_, fake_pool(1));
  EXPECT_EQ(pool_bytes(0), 0u);
}

TEST_F(PoolBooksTest, ADestroyedPoolIsNotAskedAboutUntilItsHandleIsMadeAgain) {
  books_.created(fake_pool(1), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  queries_.reserved_bytes = {{fake_pool(1), 32 * kMiB}};
  books_.destroyed(ledger_, fake_pool(1));
  books_.refresh(ledger_);
  EXPECT_EQ(queries_.reserved_queries, 0) << "its handle is dead";
  EXPECT_EQ(pool_bytes(0), 0u);
  books_.created(fake_pool(1), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  books_.refresh(ledger_);
  EXPECT_EQ(pool_bytes(0), 32 * kMiB) << "a new pool with the same handle";
  // Destroyed on one thread while another made a pool with its handle and used it at once.
  books_.destroyed(ledger_, fake_pool(1));
  books_.track(1, fake_pool(1));  // a request's exchange
  books_.refresh(ledger_);
  EXPECT_EQ(pool_bytes(1), 32 * kMiB) << "the pool in use is alive, and on device 1";
}

// A pool the books cannot place still had its figure told by its requests' exchanges.
TEST_F(PoolBooksTest, APoolPastTheTrackedOnesLeavesTheBudgetWhenDestroyed) {
  for (std::uintptr_t id = 1; id <= PoolBooks::kTrackedPoolCount; ++id)
    books_.track(0, fake_pool(id));
  ledger_.set_pool_reserved(1, reinterpret_cast<uint64_t>(fake_pool(1000)), 32 * kMiB);
  books_.destroyed(ledger_, fake_pool(1000));
  EXPECT_EQ(pool_bytes(1), 0u);
  EXPECT_EQ(ledger_.snapshot(1).held_bytes, 0u);
}

TEST_F(PoolBooksTest, PoolsPastTheTrackedOnesAreNotPlaced) {
  for (std::uintptr_t id = 1; id <= PoolBooks::kTrackedPoolCount; ++id)
    books_.track(0, fake_pool(id));
  books_.created(fake_pool(1000), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  EXPECT_EQ(books_.device_of(fake_pool(1000)), std::nullopt);
  EXPECT_FALSE(books_.plain(0, fake_pool(1000)));
  EXPECT_EQ(books_.device_of(fake_pool(PoolBooks::kTrackedPoolCount)), 0);
}

// Note [Reusing a destroyed pool's slot]: a program that makes and destroys pools as it goes
// never runs out of slots; a new pool in a destroyed one's slot has its own properties.
TEST_F(PoolBooksTest, ANewPoolTakesTheSlotOfADestroyedOne) {
  for (std::uintptr_t id = 1; id <= PoolBooks::kTrackedPoolCount; ++id)
    books_.created(fake_pool(id), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  books_.destroyed(ledger_, fake_pool(7));
  CUmemPoolProps capped = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 1);
  capped.maxSize = 64 * kMiB;
  books_.created(fake_pool(1000), capped);
  EXPECT_EQ(books_.device_of(fake_pool(1000)), 1);
  EXPECT_EQ(books_.size_cap(fake_pool(1000)), 64 * kMiB);
  EXPECT_FALSE(books_.plain(1, fake_pool(1000))) << "capped";
  EXPECT_EQ(books_.device_of(fake_pool(7)), std::nullopt) << "the destroyed pool is forgotten";
  queries_.reserved_bytes = {{fake_pool(1000), 32 * kMiB}};
  books_.refresh(ledger_);
  EXPECT_EQ(pool_bytes(1), 32 * kMiB);
  books_.created(fake_pool(1001), pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0));
  EXPECT_EQ(books_.device_of(fake_pool(1001)), std::nullopt) << "no destroyed pool's slot left";
}

}  // namespace
}  // namespace vramspill::placement
