// The modeled host clock (Note [Host clock] in tools/simcuda/src/core/host_clock.h): a call that
// waits for work, or a query that sees it done, moves the calling thread's clock to the work's
// modeled end, and work queued afterwards starts no earlier. Times are read with events: a
// record stores its stream's modeled clock when it runs.
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "driver_test_support.h"
#include "stream_test_support.h"

namespace {

constexpr size_t kWorkBytes = 100 * kMiB;

class HostClockTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_CU(cuMemAlloc(&buffer_, kWorkBytes));
    for (CUevent* event : {&start_, &end_, &later_}) ASSERT_CU(cuEventCreate(event, 0));
  }
  void TearDown() override {
    for (CUevent event : {start_, end_, later_}) cuEventDestroy(event);
    cuMemFree(buffer_);
    DriverTest::TearDown();
  }

  // On a fresh stream: start_, a 100 MiB memset, end_. Returns the stream.
  CUstream queue_work() {
    CUstream stream = nullptr;
    EXPECT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(cuEventRecord(start_, stream));
    EXPECT_CU(cuMemsetD8Async(buffer_, 1, kWorkBytes, stream));
    EXPECT_CU(cuEventRecord(end_, stream));
    return stream;
  }
  // Records later_ on another fresh stream and waits for it.
  void record_later_on_a_fresh_stream() {
    CUstream fresh = nullptr;
    ASSERT_CU(cuStreamCreate(&fresh, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuEventRecord(later_, fresh));
    ASSERT_EQ(eventually([&] { return cuEventQuery(later_); }), CUDA_SUCCESS);
    ASSERT_CU(cuStreamDestroy(fresh));
  }
  float milliseconds(CUevent from, CUevent to) {
    float elapsed = -1;
    EXPECT_CU(cuEventElapsedTime(&elapsed, from, to));
    return elapsed;
  }

  CUdeviceptr buffer_ = 0;
  CUevent start_ = nullptr, end_ = nullptr, later_ = nullptr;
};

// Each way of waiting for the work: afterwards, work on a fresh stream starts when it ended.
TEST_F(HostClockTest, WorkQueuedAfterAWaitStartsWhenTheWaitedWorkEnded) {
  const std::vector<std::pair<std::string, std::function<CUresult(CUstream)>>> waits = {
      {"cuStreamSynchronize", [](CUstream stream) { return cuStreamSynchronize(stream); }},
      {"cuCtxSynchronize", [](CUstream) { return cuCtxSynchronize(); }},
      {"cuEventSynchronize", [this](CUstream) { return cuEventSynchronize(end_); }},
      {"cuStreamQuery",
       [](CUstream stream) { return eventually([stream] { return cuStreamQuery(stream); }); }},
      {"cuEventQuery",
       [this](CUstream) { return eventually([this] { return cuEventQuery(end_); }); }},
  };
  for (const auto& [name, wait] : waits) {
    SCOPED_TRACE(name);
    CUstream stream = queue_work();
    ASSERT_CU(wait(stream));
    record_later_on_a_fresh_stream();
    const float work = milliseconds(start_, end_);
    EXPECT_GT(work, 0.0f);
    EXPECT_FLOAT_EQ(milliseconds(start_, later_), work);
    ASSERT_CU(cuStreamDestroy(stream));
  }
}

// A synchronous copy waits for the legacy stream's work, the memset queued before it included.
TEST_F(HostClockTest, ASynchronousCopyWaitsLikeASynchronisation) {
  ASSERT_CU(cuEventRecord(start_, nullptr));
  ASSERT_CU(cuMemsetD8Async(buffer_, 1, kWorkBytes, nullptr));
  ASSERT_CU(cuEventRecord(end_, nullptr));
  unsigned char byte = 0;
  ASSERT_CU(cuMemcpyDtoH(&byte, buffer_, 1));
  record_later_on_a_fresh_stream();
  const float work = milliseconds(start_, end_);
  EXPECT_GT(work, 0.0f);
  // The copy itself (one byte each way) adds a few picoseconds.
  EXPECT_NEAR(milliseconds(start_, later_), work, work * 1e-3);
}

// Without a wait the host clock stays put: the fresh stream's work starts with the other's.
TEST_F(HostClockTest, WithoutAWaitWorkOnAFreshStreamDoesNotWait) {
  Gate gate;
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuEventRecord(start_, stream));
  ASSERT_CU(gate.block(stream));  // the query below cannot see the work done
  ASSERT_CU(cuMemsetD8Async(buffer_, 1, kWorkBytes, stream));
  ASSERT_CU(cuEventRecord(end_, stream));
  EXPECT_EQ(cuStreamQuery(stream), CUDA_ERROR_NOT_READY);
  record_later_on_a_fresh_stream();
  gate.open();
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_GT(milliseconds(start_, end_), 0.0f);
  EXPECT_EQ(milliseconds(start_, later_), 0.0f);
  ASSERT_CU(cuStreamDestroy(stream));
}

// A GPU answers a query at once: work simcuda has done but that still runs in modeled time is
// not ready to a thread that queries it once, and that query costs nothing; a thread that asks
// again with no modeled time passed (a polling loop, whatever calls come between) has waited.
TEST_F(HostClockTest, AQueryDoesNotWaitButPollingDoes) {
  CUstream stream = queue_work();
  std::thread other([&] {  // simcuda's execution reaches the end; this thread's clock stays put
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(cuStreamSynchronize(stream));
  });
  other.join();
  EXPECT_EQ(cuStreamQuery(stream), CUDA_ERROR_NOT_READY) << "the work runs on in modeled time";
  EXPECT_EQ(cuEventQuery(end_), CUDA_ERROR_NOT_READY);
  record_later_on_a_fresh_stream();
  EXPECT_EQ(milliseconds(start_, later_), 0.0f) << "the queries cost nothing";
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));  // costs no modeled time either
  EXPECT_EQ(cuEventQuery(end_), CUDA_SUCCESS) << "asked again with no time passed: polled";
  record_later_on_a_fresh_stream();
  EXPECT_FLOAT_EQ(milliseconds(start_, later_), milliseconds(start_, end_));
  EXPECT_EQ(cuStreamQuery(stream), CUDA_SUCCESS) << "ended by the thread's clock";
  ASSERT_CU(cuStreamDestroy(stream));
}

}  // namespace
