// Stream capture on simcuda: recorded work replays exactly, and the calls capture forbids get
// the driver's errors (Note [Stream capture] in tools/simcuda/src/core/capture.h).
#include <future>
#include <thread>
#include <vector>

#include "driver_test_support.h"
#include "stream_test_support.h"

namespace {

class CaptureTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_DEFAULT));
    ASSERT_CU(cuMemAlloc(&device_buffer_, kBytes));
    ASSERT_CU(cuMemsetD8(device_buffer_, 0, kBytes));
  }
  void TearDown() override {
    cuCtxSynchronize();
    cuMemFree(device_buffer_);
    cuStreamDestroy(stream_);
    DriverTest::TearDown();
  }

  std::vector<unsigned char> read_back(size_t bytes = kBytes) {
    std::vector<unsigned char> host(bytes);
    EXPECT_CU(cuMemcpyDtoH(host.data(), device_buffer_, bytes));
    return host;
  }

  CUstreamCaptureStatus status(CUstream stream) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_CU(cuStreamIsCapturing(stream, &status));
    return status;
  }

  static constexpr size_t kBytes = 4096;
  CUstream stream_ = nullptr;
  CUdeviceptr device_buffer_ = 0;
};

void CUDA_CB count(void* counter) { ++*static_cast<int*>(counter); }

TEST_F(CaptureTest, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  unsigned char* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&pinned), 16));
  std::fill_n(pinned, 16, 0x11);
  CUdeviceptr scratch = 0;
  ASSERT_CU(cuMemAlloc(&scratch, 64));
  int calls = 0;

  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(status(stream_), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuMemsetD8Async(scratch, 0x22, 64, stream_));
  ASSERT_CU(cuMemcpyDtoDAsync(device_buffer_ + 100, scratch, 64, stream_));
  ASSERT_CU(cuMemcpyHtoDAsync(device_buffer_ + 120, pinned, 16, stream_));  // over the copy
  ASSERT_CU(cuLaunchHostFunc(stream_, &count, &calls));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);

  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(read_back(), std::vector<unsigned char>(kBytes, 0));

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  CUstream launch_stream = nullptr;
  ASSERT_CU(cuStreamCreate(&launch_stream, CU_STREAM_NON_BLOCKING));
  for (unsigned char fill : {0x33, 0x44}) {
    std::fill_n(pinned, 16, fill);  // a replay reads host memory when it runs
    ASSERT_CU(cuGraphLaunch(exec, launch_stream));
    ASSERT_CU(cuStreamSynchronize(launch_stream));
    std::vector<unsigned char> expected(kBytes, 0);
    std::fill_n(expected.begin() + 100, 64, 0x22);
    std::fill_n(expected.begin() + 120, 16, fill);
    EXPECT_EQ(read_back(), expected);
  }
  EXPECT_EQ(calls, 2);

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphLaunch(exec, launch_stream), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuStreamDestroy(launch_stream));
  ASSERT_CU(cuMemFree(scratch));
  ASSERT_CU(cuMemFreeHost(pinned));
}

// Note [Capturing into a graph]: the captured work follows the graph's own nodes, and
// cuStreamEndCapture hands the program's graph back.
TEST_F(CaptureTest, ACaptureIntoAGraphAppendsAfterTheNodesItDependsOn) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD8Async(device_buffer_, 0x11, 64, stream_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphNode first = nullptr;
  size_t count = 1;
  ASSERT_CU(cuGraphGetNodes(graph, &first, &count));
  ASSERT_EQ(count, 1u);

  ASSERT_CU(cuStreamBeginCaptureToGraph(stream_, graph, &first, nullptr, 1,
                                        CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(status(stream_), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_ILLEGAL_STATE);  // still being captured into
  ASSERT_CU(cuMemsetD8Async(device_buffer_ + 32, 0x22, 64, stream_));  // over the first
  CUgraph ended = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &ended));
  EXPECT_EQ(ended, graph);
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 2u);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  std::vector<unsigned char> expected(kBytes, 0);
  std::fill_n(expected.begin(), 32, 0x11);
  std::fill_n(expected.begin() + 32, 64, 0x22);
  EXPECT_EQ(read_back(), expected);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(CaptureTest, ACaptureIntoAGraphChecksTheGraphAndItsDependencies) {
  CUgraph graph = nullptr;
  CUgraph other = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD8Async(device_buffer_, 0x11, 64, stream_));
  ASSERT_CU(cuStreamEndCapture(stream_, &other));
  CUgraphNode foreign = nullptr;
  size_t count = 1;
  ASSERT_CU(cuGraphGetNodes(other, &foreign, &count));
  const auto begin = [&](CUstream stream, CUgraph into, const CUgraphNode* dependencies,
                         size_t dependency_count) {
    return cuStreamBeginCaptureToGraph(stream, into, dependencies, nullptr, dependency_count,
                                       CU_STREAM_CAPTURE_MODE_GLOBAL);
  };
  EXPECT_EQ(begin(stream_, graph, &foreign, 1), CUDA_ERROR_INVALID_VALUE);  // not its node
  EXPECT_EQ(begin(stream_, graph, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(begin(stream_, nullptr, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);

  // One capture into a graph at a time; an invalidated one leaves the graph the program's.
  CUstream second = nullptr;
  ASSERT_CU(cuStreamCreate(&second, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(begin(stream_, graph, nullptr, 0));
  EXPECT_EQ(begin(second, graph, nullptr, 0), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // invalidates
  CUgraph ended = other;
  EXPECT_EQ(cuStreamEndCapture(stream_, &ended), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(ended, nullptr);
  EXPECT_CU(cuGraphDestroy(graph));
  EXPECT_CU(cuGraphDestroy(other));
  ASSERT_CU(cuStreamDestroy(second));
}

TEST_F(CaptureTest, ForkedStreamsJoinTheCapture) {
  CUstream side = nullptr;
  ASSERT_CU(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  CUevent fork = nullptr, join = nullptr;
  ASSERT_CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));

  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ASSERT_CU(cuMemsetD8Async(device_buffer_, 1, kBytes, stream_));
  ASSERT_CU(cuEventRecord(fork, stream_));
  EXPECT_EQ(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
  ASSERT_CU(cuStreamWaitEvent(side, fork, 0));
  EXPECT_EQ(status(side), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuMemsetD8Async(device_buffer_ + 10, 2, 10, side));
  ASSERT_CU(cuEventRecord(join, side));
  ASSERT_CU(cuStreamWaitEvent(stream_, join, 0));
  ASSERT_CU(cuMemsetD8Async(device_buffer_ + 15, 3, 1, stream_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  EXPECT_EQ(status(side), CU_STREAM_CAPTURE_STATUS_NONE);

  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  std::vector<unsigned char> expected(kBytes, 1);
  std::fill_n(expected.begin() + 10, 10, 2);
  expected[15] = 3;
  EXPECT_EQ(read_back(), expected);

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuEventDestroy(fork));
  ASSERT_CU(cuEventDestroy(join));
  ASSERT_CU(cuStreamDestroy(side));
}

TEST_F(CaptureTest, CaptureInfoAndStateErrors) {
  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // the legacy stream
  EXPECT_EQ(cuStreamBeginCapture(stream_, static_cast<CUstreamCaptureMode>(7)),
            CUDA_ERROR_INVALID_VALUE);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);

  cuuint64_t first_id = 0, second_id = 0;
  CUstreamCaptureStatus state = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph capturing_graph = nullptr;
  for (cuuint64_t* id : {&first_id, &second_id}) {
    ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT_EQ(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED),
              CUDA_ERROR_ILLEGAL_STATE);
    ASSERT_CU(
        cuStreamGetCaptureInfo(stream_, &state, id, &capturing_graph, nullptr, nullptr, nullptr));
    EXPECT_EQ(state, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_NE(capturing_graph, nullptr);
    // The legacy stream would depend on the capturing blocking stream.
    EXPECT_EQ(cuStreamIsCapturing(nullptr, &state), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    EXPECT_EQ(cuStreamEndCapture(stream_, nullptr), CUDA_ERROR_INVALID_VALUE);
    ASSERT_CU(cuStreamEndCapture(stream_, &graph));
    EXPECT_EQ(graph, capturing_graph);
    ASSERT_CU(cuGraphDestroy(graph));
  }
  EXPECT_NE(first_id, second_id);
  EXPECT_EQ(cuStreamIsCapturing(stream_, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUgraphExec exec = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&exec, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphInstantiateWithFlags(nullptr, graph, 0), CUDA_ERROR_INVALID_VALUE);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);  // each thread starts in GLOBAL mode
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
}

// The error, then the capture is invalidated: later work and cuStreamEndCapture report it.
void expect_invalidated(CUstream stream, CUdeviceptr buffer) {
  CUstreamCaptureStatus state = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(cuStreamIsCapturing(stream, &state));
  EXPECT_EQ(state, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuMemsetD8Async(buffer, 0, 1, stream), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUgraph graph = reinterpret_cast<CUgraph>(uintptr_t{1});
  EXPECT_EQ(cuStreamEndCapture(stream, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);
}

TEST_F(CaptureTest, SynchronousCopyDuringGlobalCaptureIsRefused) {
  const std::vector<unsigned char> host(16, 9);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuMemcpyHtoD(device_buffer_, host.data(), 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuMemsetD8(device_buffer_, 1, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  expect_invalidated(stream_, device_buffer_);
  EXPECT_EQ(read_back(16), std::vector<unsigned char>(16, 0));  // allowed again
}

// cuMemAllocManaged, as cuMemAlloc, is a call a capture in global mode forbids; in relaxed mode
// it is allowed.
TEST_F(CaptureTest, ManagedAllocationDuringGlobalCaptureIsRefused) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  expect_invalidated(stream_, device_buffer_);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_CU(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(managed));
}

TEST_F(CaptureTest, SynchronisingWithACapturingStreamIsRefused) {
  for (auto sync : {&cuStreamSynchronize, &cuStreamQuery}) {
    ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT_EQ(sync(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(stream_, device_buffer_);
  }
}

TEST_F(CaptureTest, LegacyStreamUseDuringBlockingCaptureIsImplicitDependency) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(cuMemsetD8Async(device_buffer_, 1, 16, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  expect_invalidated(stream_, device_buffer_);

  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  expect_invalidated(stream_, device_buffer_);
}

TEST_F(CaptureTest, CaptureModesDecideWhichSynchronousCallsAreAllowed) {
  CUstream non_blocking = nullptr;
  ASSERT_CU(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING));
  const std::vector<unsigned char> host(16, 5);
  std::promise<void> began, checked;
  std::future<void> checked_future = checked.get_future();
  // Another thread captures in GLOBAL mode, which restricts every GLOBAL-mode thread.
  std::thread capturer([&] {
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(cuStreamBeginCapture(non_blocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
    began.set_value();
    checked_future.wait();
    CUgraph graph = nullptr;
    EXPECT_EQ(cuStreamEndCapture(non_blocking, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  });
  began.get_future().wait();
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_CU(cuMemcpyHtoD(device_buffer_, host.data(), 16));  // others' captures are ignored
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(non_blocking, &graph), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  EXPECT_EQ(cuMemcpyHtoD(device_buffer_, host.data(), 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  checked.set_value();
  capturer.join();
  EXPECT_EQ(read_back(16), host);
  ASSERT_CU(cuStreamDestroy(non_blocking));
}

TEST_F(CaptureTest, DependenciesAcrossTheCaptureBoundaryAreRefused) {
  CUevent outside = nullptr;
  ASSERT_CU(cuEventCreate(&outside, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventRecord(outside, nullptr));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(cuStreamWaitEvent(stream_, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  expect_invalidated(stream_, device_buffer_);

  int calls = 0;
  auto callback = [](CUstream, CUresult, void* counter) { ++*static_cast<int*>(counter); };
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(cuStreamAddCallback(stream_, callback, &calls, 0),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  expect_invalidated(stream_, device_buffer_);
  EXPECT_EQ(calls, 0);
  ASSERT_CU(cuEventDestroy(outside));
}

TEST_F(CaptureTest, EmptyGraphLaunchesOnAnyStream) {
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD));
  ASSERT_CU(cuGraphUpload(exec, stream_));
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuGraphExecDestroy(exec));
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(graph));
}

}  // namespace
