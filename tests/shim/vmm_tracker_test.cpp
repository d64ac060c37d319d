// The VMM tracker alone (Note [VMM memory lives until its last mapping goes]): which call frees
// a physical allocation, and that a refused call can be undone.
#include "core/vmm_tracker.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace vramspill::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = 0x7f0000000000;

TEST(VmmTracker, AnUnmappedHandleIsFreedByItsRelease) {
  VmmTracker tracker;
  tracker.created(11);
  EXPECT_TRUE(tracker.release(11).freed);
  EXPECT_EQ(tracker.tracked_handles(), 0u);
}

TEST(VmmTracker, AMappedHandleIsFreedByItsLastUnmap) {
  VmmTracker tracker;
  tracker.created(11);
  tracker.mapped(kBase, 2 * kMiB, 11);
  tracker.mapped(kBase + 4 * kMiB, 2 * kMiB, 11);
  EXPECT_FALSE(tracker.release(11).freed);
  EXPECT_TRUE(tracker.unmap(kBase, 2 * kMiB).freed_handles.empty());
  const VmmTracker::Unmapping last = tracker.unmap(kBase + 4 * kMiB, 2 * kMiB);
  EXPECT_EQ(last.freed_handles, std::vector<uint64_t>{11});
  EXPECT_EQ(tracker.tracked_handles(), 0u);
  EXPECT_EQ(tracker.mappings(), 0u);
}

// A handle value the driver hands out again is a new allocation, whatever the books still held of
// the old one: its mappings are the new one's alone.
TEST(VmmTracker, AReusedHandleValueOwesNothingToTheOldOnesMappings) {
  VmmTracker tracker;
  tracker.created(11);
  tracker.mapped(kBase, 2 * kMiB, 11);  // an unmap the books never saw
  tracker.created(11);
  EXPECT_EQ(tracker.mappings(), 0u);
  tracker.mapped(kBase + 4 * kMiB, 2 * kMiB, 11);
  EXPECT_TRUE(tracker.unmap(kBase, 2 * kMiB).freed_handles.empty()) << "nothing there now";
  EXPECT_FALSE(tracker.release(11).freed) << "still mapped";
  EXPECT_EQ(tracker.unmap(kBase + 4 * kMiB, 2 * kMiB).freed_handles, std::vector<uint64_t>{11});
}

TEST(VmmTracker, EachRetainNeedsItsOwnRelease) {
  VmmTracker tracker;
  tracker.created(11);
  tracker.retained(11);
  EXPECT_FALSE(tracker.release(11).freed);
  EXPECT_TRUE(tracker.release(11).freed);
}

TEST(VmmTracker, OneUnmapCoversEveryMappingInItsRange) {
  VmmTracker tracker;
  for (uint64_t handle : {11, 12, 13}) tracker.created(handle);
  tracker.mapped(kBase, 2 * kMiB, 11);
  tracker.mapped(kBase + 2 * kMiB, 2 * kMiB, 12);
  tracker.mapped(kBase + 8 * kMiB, 2 * kMiB, 13);  // outside the unmapped range
  for (uint64_t handle : {11, 12, 13}) EXPECT_FALSE(tracker.release(handle).freed);
  const VmmTracker::Unmapping unmapping = tracker.unmap(kBase, 4 * kMiB);
  EXPECT_EQ(unmapping.removed.size(), 2u);
  EXPECT_EQ(unmapping.freed_handles, (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(tracker.tracked_handles(), 1u);
}

TEST(VmmTracker, RefusedCallsAreUndone) {
  VmmTracker tracker;
  tracker.created(11);
  tracker.mapped(kBase, 2 * kMiB, 11);
  EXPECT_FALSE(tracker.release(11).freed);
  const VmmTracker::Unmapping unmapping = tracker.unmap(kBase, 2 * kMiB);
  ASSERT_EQ(unmapping.freed_handles, std::vector<uint64_t>{11});
  tracker.undo_unmap(unmapping);  // the driver refused the unmap: still mapped, still alive
  EXPECT_EQ(tracker.mappings(), 1u);
  EXPECT_EQ(tracker.tracked_handles(), 1u);
  EXPECT_EQ(tracker.unmap(kBase, 2 * kMiB).freed_handles, std::vector<uint64_t>{11});

  tracker.created(12);
  const VmmTracker::Released released = tracker.release(12);
  EXPECT_TRUE(released.freed);
  tracker.undo_release(12, released);  // the driver refused the release: one reference again
  EXPECT_TRUE(tracker.release(12).freed);
}

// A second release of a handle that only its mapping keeps alive is the program's error: the
// driver's refusal gives back no reference, and the last unmap still frees it.
TEST(VmmTracker, ARefusedReleaseOfAReleasedHandleGivesNoReferenceBack) {
  VmmTracker tracker;
  tracker.created(11);
  tracker.mapped(kBase, 2 * kMiB, 11);
  EXPECT_FALSE(tracker.release(11).freed);
  const VmmTracker::Released again = tracker.release(11);
  EXPECT_FALSE(again.took_reference);
  tracker.undo_release(11, again);
  EXPECT_EQ(tracker.unmap(kBase, 2 * kMiB).freed_handles, std::vector<uint64_t>{11});
  EXPECT_EQ(tracker.tracked_handles(), 0u);
}

// A handle the tracker never saw (host memory, or one it could not record) counts as freed by
// its release, as cuMemRelease of an unmapped handle would free it.
TEST(VmmTracker, UntrackedHandlesAreFreedByTheirRelease) {
  VmmTracker tracker;
  EXPECT_TRUE(tracker.release(99).freed);
  tracker.mapped(kBase, 2 * kMiB, 99);  // mappings of untracked handles are not recorded
  EXPECT_EQ(tracker.mappings(), 0u);
}

}  // namespace
}  // namespace vramspill::core
