// Note [Counting captures] (shim/core/capture_origins.h): captures counted by the stream each
// began on, so that only an end on that stream, or the end of it or its context, uncounts one. Note [The
// capture gate] (shim/core/capture_gate.h): the gate is held only when no capture is in progress.
#include "core/capture_origins.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/capture_gate.h"

namespace vramspill::core {
namespace {

constexpr uint64_t kStream = 0x7000;
constexpr uint64_t kOther = 0x7100;
constexpr uint64_t kPerThread = 0x2;  // CU_STREAM_PER_THREAD
constexpr uint64_t kContext = 0xc000;
constexpr uint64_t kOtherContext = 0xc100;

TEST(CaptureOrigins, OnlyTheStreamACaptureBeganOnEndsIt) {
  std::atomic<int> count{0};
  CaptureOrigins origins(count);
  origins.begun(kStream, kContext);
  EXPECT_EQ(count, 1);
  EXPECT_TRUE(origins.began_on(kStream));
  origins.ended(kOther, kContext);  // a stream that took part in the capture, or none
  EXPECT_EQ(count, 1);
  origins.ended(kStream, kContext);
  EXPECT_EQ(count, 0);
  origins.ended(kStream, kContext);  // ended twice: once counted, once uncounted
  EXPECT_EQ(count, 0);
}

TEST(CaptureOrigins, EachPerThreadStreamCaptureIsAnEntryOfItsOwn) {
  std::atomic<int> count{0};
  CaptureOrigins origins(count);
  origins.begun(kPerThread, kContext);  // two threads' default streams, one key
  origins.begun(kPerThread, kContext);
  origins.ended(kPerThread, kContext);
  EXPECT_EQ(count, 1);
  EXPECT_TRUE(origins.began_on(kPerThread));
  origins.ended(kPerThread, kContext);
  EXPECT_EQ(count, 0);
}

// A context that ends (destroyed, or a primary context reset) takes its streams' captures with it,
// and only those; a capture whose context is unknown ends only at its stream.
TEST(CaptureOrigins, AContextThatEndsTakesItsCapturesWithIt) {
  std::atomic<int> count{0};
  CaptureOrigins origins(count);
  origins.begun(kStream, kContext);
  origins.begun(kPerThread, kContext);
  origins.begun(kOther, kOtherContext);
  origins.begun(0x7200, 0);
  origins.context_ended(kContext);
  EXPECT_EQ(count, 2);
  EXPECT_FALSE(origins.began_on(kStream));
  EXPECT_FALSE(origins.began_on(kPerThread));
  EXPECT_TRUE(origins.began_on(kOther));
  origins.context_ended(0);
  EXPECT_EQ(count, 2) << "no context is not every context";
  origins.context_ended(kOtherContext);
  origins.ended(0x7200, 0);
  EXPECT_EQ(count, 0);
}

// Per-thread default streams of two contexts share a key: an end takes its own context's capture,
// so that the other context's ending later does not take a capture still in progress.
TEST(CaptureOrigins, AnEndOnASharedKeyTakesItsOwnContextsCapture) {
  std::atomic<int> count{0};
  CaptureOrigins origins(count);
  origins.begun(kPerThread, kContext);
  origins.begun(kPerThread, kOtherContext);
  origins.ended(kPerThread, kOtherContext);
  origins.context_ended(kOtherContext);
  EXPECT_EQ(count, 1) << "kContext's capture goes on";
  EXPECT_TRUE(origins.began_on(kPerThread));
  origins.ended(kPerThread, 0);  // its context unknown: any capture on the key
  EXPECT_EQ(count, 0);
}

void begin(CaptureGate& captures, uint64_t stream) {
  const auto changing = captures.change();
  captures.begun(stream, kContext);
}

void end(CaptureGate& captures, uint64_t stream) {
  const auto changing = captures.change();
  captures.ended(stream, kContext);
}

TEST(CaptureGate, IsHeldOnlyWhileNoCaptureIsInProgress) {
  CaptureGate captures;
  EXPECT_TRUE(captures.hold_if_none().owns_lock());
  begin(captures, kStream);
  EXPECT_TRUE(captures.capturing());
  EXPECT_FALSE(captures.hold_if_none().owns_lock());
  EXPECT_FALSE(captures.try_hold_if_none().owns_lock());
  EXPECT_TRUE(captures.hold().owns_lock()) << "a plain hold does not ask";
  end(captures, kOther);
  EXPECT_FALSE(captures.hold_if_none().owns_lock()) << "ended on a stream it did not begin on";
  end(captures, kStream);
  EXPECT_FALSE(captures.capturing());
  EXPECT_TRUE(captures.hold_if_none().owns_lock());
  EXPECT_TRUE(captures.try_hold_if_none().owns_lock());
}

// The try form never waits: a capture beginning or ending (the gate held exclusively) counts as
// one in progress, even when the count is already 0.
TEST(CaptureGate, TheTryFormRefusesWhileACaptureBeginsOrEnds) {
  CaptureGate captures;
  begin(captures, kStream);
  const auto changing = captures.change();
  captures.ended(kStream, kContext);
  bool held = true;
  std::thread([&] { held = captures.try_hold_if_none().owns_lock(); }).join();
  EXPECT_FALSE(held);
}

}  // namespace
}  // namespace vramspill::core
