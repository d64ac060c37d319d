// Note [Counting captures] (shim/core/capture_origins.h): captures counted by the stream each
// began on, so that only an end on that stream, or its destruction, uncounts one.
#include "core/capture_origins.h"

#include <gtest/gtest.h>

#include <atomic>

namespace vramspill::core {
namespace {

constexpr uint64_t kStream = 0x7000;
constexpr uint64_t kOther = 0x7100;
constexpr uint64_t kPerThread = 0x2;  // CU_STREAM_PER_THREAD

TEST(CaptureOrigins, OnlyTheStreamACaptureBeganOnEndsIt) {
  std::atomic<int> count{0};
  CaptureOrigins origins(count);
  origins.begun(kStream);
  EXPECT_EQ(count, 1);
  EXPECT_TRUE(origins.began_on(kStream));
  origins.ended(kOther);  // a stream that took part in the capture, or none
  EXPECT_EQ(count, 1);
  origins.ended(kStream);
  EXPECT_EQ(count, 0);
  origins.ended(kStream);  // ended twice: once counted, once uncounted
  EXPECT_EQ(count, 0);
}

TEST(CaptureOrigins, EachPerThreadStreamCaptureIsAnEntryOfItsOwn) {
  std::atomic<int> count{0};
  CaptureOrigins origins(count);
  origins.begun(kPerThread);  // two threads' default streams, one key
  origins.begun(kPerThread);
  origins.ended(kPerThread);
  EXPECT_EQ(count, 1);
  EXPECT_TRUE(origins.began_on(kPerThread));
  origins.ended(kPerThread);
  EXPECT_EQ(count, 0);
}

}  // namespace
}  // namespace vramspill::core
