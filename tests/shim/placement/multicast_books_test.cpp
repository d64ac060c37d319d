// placement/multicast_books: whether one of the program's multicast objects waits for memory
// (Note [Multicast binds device memory] in shim/placement/vmm_spill.h).
#include "placement/multicast_books.h"

#include <gtest/gtest.h>

namespace vramspill::placement {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kObject = 0x4d43000000000001;
constexpr uint64_t kImported = 0x4d43000000000002;

TEST(MulticastBooks, AnObjectWaitsUntilEachDeviceHasBoundItsWholeSizePieceByPiece) {
  MulticastBooks books;
  ASSERT_TRUE(books.created(kObject, 8 * kMiB));
  EXPECT_FALSE(books.waiting()) << "no device added yet";
  ASSERT_TRUE(books.device_added(kObject));
  ASSERT_TRUE(books.device_added(kObject));
  EXPECT_TRUE(books.waiting());
  books.bound(kObject, 4 * kMiB);  // device 0's first piece
  books.bound(kObject, 4 * kMiB);  // its second
  EXPECT_TRUE(books.waiting()) << "device 1 has bound nothing";
  books.bound(kObject, 8 * kMiB);
  EXPECT_FALSE(books.waiting());
  books.unbound(kObject, 4 * kMiB);
  EXPECT_TRUE(books.waiting());
  ASSERT_TRUE(books.take(kObject).has_value());
  EXPECT_FALSE(books.waiting()) << "released";
  EXPECT_FALSE(books.take(kObject).has_value());
}

// An object imported from another process (NCCL's ranks but local rank 0), whose size is not
// known: it waits until each device added has had its bind, not until its release (NCCL keeps it
// for the communicator's life, and no handle of those ranks spilled meanwhile).
TEST(MulticastBooks, AnObjectOfUnknownSizeWaitsForABindPerDeviceAdded) {
  MulticastBooks books;
  ASSERT_TRUE(books.device_added(kImported));  // imported: never created here
  ASSERT_TRUE(books.device_added(kImported));
  EXPECT_TRUE(books.waiting());
  books.bound(kImported, 64 * kMiB);
  EXPECT_TRUE(books.waiting()) << "one device of two has bound";
  books.bound(kImported, 64 * kMiB);
  EXPECT_FALSE(books.waiting());
  books.unbound(kImported, 64 * kMiB);
  EXPECT_TRUE(books.waiting());
  const auto taken = books.take(kImported);
  ASSERT_TRUE(taken.has_value());
  EXPECT_FALSE(books.waiting());
  books.put_back(kImported, *taken);  // the driver refused the release
  EXPECT_TRUE(books.waiting());
}

TEST(MulticastBooks, AValueMadeAgainStartsAfresh) {
  MulticastBooks books;
  ASSERT_TRUE(books.created(kObject, 2 * kMiB));
  ASSERT_TRUE(books.device_added(kObject));
  EXPECT_TRUE(books.waiting());
  ASSERT_TRUE(books.created(kObject, 2 * kMiB));  // its release went unseen
  EXPECT_FALSE(books.waiting());
}

}  // namespace
}  // namespace vramspill::placement
