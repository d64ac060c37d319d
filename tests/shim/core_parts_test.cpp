// The ledger's building blocks: byte formatting, route names and the open-addressing table.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <unordered_map>

#include "core/allocation_table.h"
#include "core/host_allocations.h"
#include "util/bytes.h"
#include "core/route.h"

namespace vramspill::core {
namespace {

TEST(FormatBytes, UsesBinaryUnitsWithOneDecimal) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(uint64_t{20} << 30), "20.0 GiB");
  EXPECT_EQ(format_bytes((uint64_t{32} << 30) / 10), "3.2 GiB");
  EXPECT_EQ(format_bytes((uint64_t{1} << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(format_bytes(UINT64_MAX), "16.0 EiB");
}

TEST(FormatBytes, WritesIntoASmallBufferWithoutOverflow) {
  std::array<char, 6> buffer{};
  const std::size_t length = format_bytes(uint64_t{3} << 30, buffer);
  EXPECT_EQ(length, 5u);
  EXPECT_EQ(std::string(buffer.data()), "3.0 G");
  EXPECT_EQ(format_bytes(1, std::span<char>{}), 0u);
}

TEST(Routes, EachRouteHasItsOwnDriverNameAndKeySpace) {
  std::set<std::string> names;
  for (std::size_t r = 0; r < kRouteCount; ++r) {
    names.insert(route_name(static_cast<Route>(r)));
  }
  EXPECT_EQ(names.size(), kRouteCount);
  EXPECT_STREQ(route_name(Route::kMemAlloc), "cuMemAlloc");
  EXPECT_STREQ(route_name(Route::kMemAllocFromPoolAsync), "cuMemAllocFromPoolAsync");
  EXPECT_EQ(key_space(Route::kMemAllocAsync), KeySpace::kPointer);
  EXPECT_EQ(key_space(Route::kMemCreate), KeySpace::kVmmHandle);
  EXPECT_EQ(key_space(Route::kArray), KeySpace::kArray);
  EXPECT_TRUE(is_pool_route(Route::kMemAllocAsync));
  EXPECT_FALSE(is_pool_route(Route::kMemAllocManaged));
}

// Random inserts and erases against std::unordered_map: exercises growth and the backward shift
// of Note [Allocation table layout], with keys dense enough to form long probe clusters.
// Memory pinned again at an address whose last pinning the shim never saw freed (its context
// went with it) replaces it: the caller gives the old bytes back.
TEST(HostAllocations, PinningAnAddressAgainReportsWhatItReplaces) {
  HostAllocations pinned;
  uint64_t replaced = 7;
  ASSERT_TRUE(pinned.add(0x1000, 64, &replaced));
  EXPECT_EQ(replaced, 0u);
  ASSERT_TRUE(pinned.add(0x1000, 32, &replaced));
  EXPECT_EQ(replaced, 64u);
  EXPECT_EQ(pinned.remove(0x1000), 32u);
  EXPECT_EQ(pinned.remove(0x1000), std::nullopt);
}

// A free the driver refused puts its record back, unless the address was pinned again meanwhile:
// then the new record is the live one.
TEST(HostAllocations, ARecordPutBackNeverReplacesALiveOne) {
  HostAllocations pinned;
  ASSERT_TRUE(pinned.add(0x1000, 64));
  const std::optional<uint64_t> removed = pinned.remove(0x1000);
  ASSERT_EQ(removed, 64u);
  EXPECT_TRUE(pinned.put_back(0x1000, *removed));
  EXPECT_EQ(pinned.remove(0x1000), 64u);
  ASSERT_TRUE(pinned.add(0x1000, 32));  // pinned anew before the refused free's record came back
  EXPECT_FALSE(pinned.put_back(0x1000, 64));
  EXPECT_EQ(pinned.remove(0x1000), 32u);
}

TEST(AllocationTable, AgreesWithAReferenceMapUnderChurn) {
  AllocationTable table;
  std::unordered_map<uint64_t, uint64_t> reference;  // key -> bytes, pointer space only
  std::mt19937_64 random(42);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t key = (random() % 4096 + 1) * 256;
    const uint64_t hash = AllocationTable::hash(KeySpace::kPointer, key);
    if (random() % 3 != 0) {
      const uint64_t bytes = random() % 1000;
      Allocation old;
      const bool replaced = table.insert(key, bytes, 0, Route::kMemAlloc, hash, old);
      const auto it = reference.find(key);
      ASSERT_EQ(replaced, it != reference.end());
      if (replaced) {
        ASSERT_EQ(old.key, key);
        ASSERT_EQ(old.bytes, it->second);
      }
      reference[key] = bytes;
    } else {
      Allocation erased;
      const bool found = table.erase(KeySpace::kPointer, key, hash, erased);
      const auto it = reference.find(key);
      ASSERT_EQ(found, it != reference.end());
      if (found) {
        ASSERT_EQ(erased.key, key);
        ASSERT_EQ(erased.bytes, it->second);
        reference.erase(it);
      }
    }
    ASSERT_EQ(table.size(), reference.size());
  }
  std::size_t visited = 0;
  table.for_each([&](const Allocation& entry) {
    ++visited;
    EXPECT_EQ(reference.at(entry.key), entry.bytes);
  });
  EXPECT_EQ(visited, reference.size());
}

}  // namespace
}  // namespace vramspill::core
