// core/remap_window: submissions never overlap a closed window, a closed window waits for the
// submissions in flight, movers take turns, and nothing is lost (Note [Remap window]).
#include "core/remap_window.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace vramspill::core {
namespace {

using namespace std::chrono_literals;

TEST(RemapWindow, CloseWaitsForTheSubmissionInFlight) {
  RemapWindow window;
  std::atomic<bool> closed{false};
  // Held on the heap so that the test can end it early (the type neither copies nor moves).
  std::unique_ptr<RemapWindow::Submission> submission(new RemapWindow::Submission(window.enter()));
  std::thread mover([&] {
    const RemapWindow::Exclusive exclusive = window.close();
    closed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(closed) << "the window closed under a submission";
  submission.reset();
  mover.join();
  EXPECT_TRUE(closed);
  EXPECT_EQ(window.windows(), 1u);
}

TEST(RemapWindow, SubmissionsWaitWhileTheWindowIsClosed) {
  RemapWindow window;
  std::atomic<bool> entered{false};
  std::unique_ptr<RemapWindow::Exclusive> exclusive(new RemapWindow::Exclusive(window.close()));
  std::thread submitter([&] {
    const RemapWindow::Submission submission = window.enter();
    entered = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(entered) << "a submission entered a closed window";
  exclusive.reset();
  submitter.join();
  EXPECT_TRUE(entered);
}

// Many submitters and two movers: a mover inside its window never sees a submission in flight,
// and a submitter never sees a mover inside, for many rounds.
TEST(RemapWindow, NeverOverlapsUnderContention) {
  RemapWindow window;
  std::atomic<int> submitting{0};
  std::atomic<int> moving{0};
  std::atomic<int> overlaps{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> submissions{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        const RemapWindow::Submission submission = window.enter();
        submitting.fetch_add(1);
        if (moving.load() != 0) overlaps.fetch_add(1);
        submitting.fetch_sub(1);
        submissions.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (int m = 0; m < 2; ++m) {
    threads.emplace_back([&] {
      for (int round = 0; round < 300; ++round) {
        const RemapWindow::Exclusive exclusive = window.close();
        if (moving.fetch_add(1) != 0) overlaps.fetch_add(1);  // two movers at once
        if (submitting.load() != 0) overlaps.fetch_add(1);
        std::this_thread::yield();
        moving.fetch_sub(1);
      }
    });
  }
  threads[6].join();
  threads[7].join();
  stop = true;
  for (int t = 0; t < 6; ++t) threads[static_cast<std::size_t>(t)].join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(window.windows(), 600u);
  EXPECT_GT(submissions.load(), 0u);
}

TEST(RemapWindow, IsConstantInitialised) {
  static constinit RemapWindow window;
  const RemapWindow::Submission submission = window.enter();
  EXPECT_EQ(window.windows(), 0u);
}

}  // namespace
}  // namespace vramspill::core
