// Streams and events on simcuda: asynchronous in-order execution, the default streams' implicit
// synchronisation, event waits, host functions and modeled event timing.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "driver_test_support.h"
#include "stream_test_support.h"

namespace {

using StreamTest = DriverTest;

TEST_F(StreamTest, StreamPropertiesFollowTheDriver) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  unsigned int flags = 0;
  ASSERT_CU(cuStreamGetFlags(stream, &flags));
  EXPECT_EQ(flags, unsigned{CU_STREAM_NON_BLOCKING});
  CUcontext context = nullptr;
  ASSERT_CU(cuStreamGetCtx(stream, &context));
  EXPECT_EQ(context, context_);

  int least = 1, greatest = 1;
  ASSERT_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT_LE(greatest, least);
  CUstream urgent = nullptr;
  ASSERT_CU(cuStreamCreateWithPriority(&urgent, CU_STREAM_DEFAULT, greatest - 100));
  int priority = 1;
  ASSERT_CU(cuStreamGetPriority(urgent, &priority));
  EXPECT_EQ(priority, greatest);  // clamped, not refused

  ASSERT_CU(cuStreamDestroy(urgent));
  ASSERT_CU(cuStreamDestroy(stream));
  EXPECT_EQ(cuStreamDestroy(stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamCreate(&stream, 0x10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(StreamTest, QueryReportsPendingWork) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_DEFAULT));
  EXPECT_CU(cuStreamQuery(stream));
  {
    Gate gate;
    ASSERT_CU(gate.block(stream));
    expect_stays_not_ready([&] { return cuStreamQuery(stream); });
    gate.open();
    ASSERT_CU(cuStreamSynchronize(stream));
    EXPECT_CU(cuStreamQuery(stream));
  }
  ASSERT_CU(cuStreamDestroy(stream));
}

void CUDA_CB append_index(void* data) {
  auto* entry = static_cast<std::pair<std::vector<int>*, int>*>(data);
  entry->first->push_back(entry->second);
}

TEST_F(StreamTest, HostFunctionsAndCallbacksRunInOrder) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<int> order;
  std::vector<std::pair<std::vector<int>*, int>> entries;
  for (int i = 0; i < 200; ++i) entries.emplace_back(&order, i);
  for (auto& entry : entries) ASSERT_CU(cuLaunchHostFunc(stream, &append_index, &entry));
  struct Seen {
    CUstream stream = nullptr;
    CUresult status = CUDA_ERROR_UNKNOWN;
    size_t after = 0;
    std::vector<int>* order = nullptr;
  } seen{.order = &order};
  auto callback = [](CUstream hStream, CUresult status, void* data) {
    auto* out = static_cast<Seen*>(data);
    *out = {hStream, status, out->order->size(), out->order};
  };
  ASSERT_CU(cuStreamAddCallback(stream, callback, &seen, 0));
  ASSERT_CU(cuStreamSynchronize(stream));
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(seen.stream, stream);
  EXPECT_EQ(seen.status, CUDA_SUCCESS);
  EXPECT_EQ(seen.after, 200u);
  EXPECT_EQ(cuStreamAddCallback(stream, callback, &seen, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuStreamDestroy(stream));
}

// Each memset overwrites the same word and each copy moves it to its own slot: every slot holds
// its index only if the 400 operations ran in the order queued.
TEST_F(StreamTest, LongChainOfCopiesFinishesInOrder) {
  constexpr unsigned kSteps = 200;
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr scratch = 0, slots = 0;
  ASSERT_CU(cuMemAlloc(&scratch, 4));
  ASSERT_CU(cuMemAlloc(&slots, kSteps * 4));
  {
    Gate gate;  // everything is queued before anything runs
    ASSERT_CU(gate.block(stream));
    for (unsigned i = 0; i < kSteps; ++i) {
      ASSERT_CU(cuMemsetD32Async(scratch, i, 1, stream));
      ASSERT_CU(cuMemcpyDtoDAsync(slots + 4 * i, scratch, 4, stream));
    }
    gate.open();
    ASSERT_CU(cuStreamSynchronize(stream));
  }
  std::vector<unsigned> host(kSteps);
  ASSERT_CU(cuMemcpyDtoH(host.data(), slots, kSteps * 4));
  for (unsigned i = 0; i < kSteps; ++i) EXPECT_EQ(host[i], i);
  ASSERT_CU(cuMemFree(scratch));
  ASSERT_CU(cuMemFree(slots));
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(StreamTest, StreamWaitEventOrdersTwoStreams) {
  CUstream producer = nullptr, consumer = nullptr;
  ASSERT_CU(cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
  CUevent produced = nullptr, consumed = nullptr;
  ASSERT_CU(cuEventCreate(&produced, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&consumed, CU_EVENT_DEFAULT));
  CUdeviceptr source = 0, target = 0;
  ASSERT_CU(cuMemAlloc(&source, 4));
  ASSERT_CU(cuMemAlloc(&target, 4));
  ASSERT_CU(cuMemsetD32Async(target, 0, 1, consumer));  // ordered before the copy
  {
    Gate gate;
    ASSERT_CU(gate.block(producer));
    ASSERT_CU(cuMemsetD32Async(source, 7, 1, producer));
    ASSERT_CU(cuEventRecord(produced, producer));
    ASSERT_CU(cuStreamWaitEvent(consumer, produced, 0));
    ASSERT_CU(cuMemcpyDtoDAsync(target, source, 4, consumer));
    ASSERT_CU(cuEventRecord(consumed, consumer));
    expect_stays_not_ready([&] { return cuEventQuery(consumed); });
    gate.open();
    ASSERT_CU(cuEventSynchronize(consumed));
  }
  unsigned value = 0;
  ASSERT_CU(cuMemcpyDtoH(&value, target, 4));
  EXPECT_EQ(value, 7u);
  ASSERT_CU(cuEventDestroy(produced));
  ASSERT_CU(cuEventDestroy(consumed));
  ASSERT_CU(cuMemFree(source));
  ASSERT_CU(cuMemFree(target));
  ASSERT_CU(cuStreamDestroy(producer));
  ASSERT_CU(cuStreamDestroy(consumer));
}

// Note [Default streams]: legacy-stream work waits for earlier work on blocking streams, not on
// non-blocking ones; and blocking streams wait for earlier legacy-stream work.
TEST_F(StreamTest, LegacyStreamWaitsForBlockingStreamsOnly) {
  CUstream blocking = nullptr, non_blocking = nullptr;
  ASSERT_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  ASSERT_CU(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING));
  CUevent legacy_done = nullptr;
  ASSERT_CU(cuEventCreate(&legacy_done, CU_EVENT_DEFAULT));
  {
    Gate gate;
    ASSERT_CU(gate.block(non_blocking));
    ASSERT_CU(cuEventRecord(legacy_done, nullptr));
    EXPECT_EQ(eventually([&] { return cuEventQuery(legacy_done); }), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
  }
  {
    Gate gate;
    ASSERT_CU(gate.block(blocking));
    ASSERT_CU(cuEventRecord(legacy_done, nullptr));
    expect_stays_not_ready([&] { return cuEventQuery(legacy_done); });
    expect_stays_not_ready([&] { return cuStreamQuery(CU_STREAM_LEGACY); });
    gate.open();
    ASSERT_CU(cuEventSynchronize(legacy_done));
  }
  ASSERT_CU(cuEventDestroy(legacy_done));
  ASSERT_CU(cuStreamDestroy(blocking));
  ASSERT_CU(cuStreamDestroy(non_blocking));
}

TEST_F(StreamTest, BlockingStreamsWaitForTheLegacyStream) {
  CUstream blocking = nullptr, non_blocking = nullptr;
  ASSERT_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  ASSERT_CU(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING));
  CUevent on_blocking = nullptr, on_non_blocking = nullptr;
  ASSERT_CU(cuEventCreate(&on_blocking, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&on_non_blocking, CU_EVENT_DEFAULT));
  {
    Gate gate;
    ASSERT_CU(gate.block(nullptr));  // the legacy stream
    ASSERT_CU(cuEventRecord(on_blocking, blocking));
    ASSERT_CU(cuEventRecord(on_non_blocking, non_blocking));
    EXPECT_EQ(eventually([&] { return cuEventQuery(on_non_blocking); }), CUDA_SUCCESS);
    expect_stays_not_ready([&] { return cuEventQuery(on_blocking); });
    gate.open();
    ASSERT_CU(cuEventSynchronize(on_blocking));
  }
  ASSERT_CU(cuEventDestroy(on_blocking));
  ASSERT_CU(cuEventDestroy(on_non_blocking));
  ASSERT_CU(cuStreamDestroy(blocking));
  ASSERT_CU(cuStreamDestroy(non_blocking));
}

// The _ptsz exports resolve NULL as the calling thread's own per-thread stream; the legacy
// stream still waits for it, since per-thread streams are blocking.
TEST_F(StreamTest, PerThreadExportsUseTheCallingThreadsStream) {
  const auto launch_pt = PER_THREAD(cuLaunchHostFunc);
  const auto query_pt = PER_THREAD(cuStreamQuery);
  const auto record_pt = PER_THREAD(cuEventRecord);
  const auto memset_pt = PER_THREAD(cuMemsetD8Async);
  ASSERT_NE(launch_pt, nullptr);
  ASSERT_NE(launch_pt, &cuLaunchHostFunc);

  CUevent mine = nullptr, legacy = nullptr;
  ASSERT_CU(cuEventCreate(&mine, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&legacy, CU_EVENT_DEFAULT));
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, 64));
  Gate gate;
  CUresult other_query = CUDA_ERROR_UNKNOWN, other_explicit_query = CUDA_ERROR_UNKNOWN;
  std::thread other([&] {
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(gate.block(nullptr, launch_pt));  // holds the other thread's per-thread stream
    other_query = query_pt(nullptr);
    other_explicit_query = cuStreamQuery(CU_STREAM_PER_THREAD);
  });
  other.join();
  EXPECT_EQ(other_query, CUDA_ERROR_NOT_READY);
  EXPECT_EQ(other_explicit_query, CUDA_ERROR_NOT_READY);

  ASSERT_CU(memset_pt(buffer, 1, 64, nullptr));
  ASSERT_CU(record_pt(mine, nullptr));
  EXPECT_EQ(eventually([&] { return cuEventQuery(mine); }), CUDA_SUCCESS);
  EXPECT_CU(query_pt(nullptr));
  ASSERT_CU(cuEventRecord(legacy, nullptr));
  expect_stays_not_ready([&] { return cuEventQuery(legacy); });
  gate.open();
  ASSERT_CU(cuEventSynchronize(legacy));
  ASSERT_CU(cuEventDestroy(mine));
  ASSERT_CU(cuEventDestroy(legacy));
  ASSERT_CU(cuMemFree(buffer));
}

// Modeled times: bytes over the default bandwidths (HBM 4.3e12 B/s, link 5.59e10 B/s).
TEST_F(StreamTest, ElapsedTimeIsTheModeledCopyTime) {
  constexpr size_t kBytes = 100 * kMiB;
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent start = nullptr, middle = nullptr, end = nullptr;
  ASSERT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&middle, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&end, CU_EVENT_DEFAULT));
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, kBytes));
  ASSERT_CU(cuMemAlloc(&b, kBytes));
  std::vector<unsigned char> host(kBytes, 1);

  ASSERT_CU(cuEventRecord(start, stream));
  ASSERT_CU(cuMemcpyHtoDAsync(a, host.data(), kBytes, stream));
  ASSERT_CU(cuEventRecord(middle, stream));
  ASSERT_CU(cuMemcpyDtoDAsync(b, a, kBytes, stream));
  ASSERT_CU(cuEventRecord(end, stream));
  ASSERT_CU(cuEventSynchronize(end));

  float upload_ms = 0, device_ms = 0;
  ASSERT_CU(cuEventElapsedTime(&upload_ms, start, middle));
  ASSERT_CU(cuEventElapsedTime(&device_ms, middle, end));
  const double bytes = static_cast<double>(kBytes);
  const double expected_upload_ms = (bytes / 5.59e10 + bytes / 4.3e12) * 1e3;  // ~1.90 ms
  const double expected_device_ms = 2 * bytes / 4.3e12 * 1e3;                 // read + write
  EXPECT_NEAR(upload_ms, expected_upload_ms, expected_upload_ms * 1e-3);
  EXPECT_NEAR(device_ms, expected_device_ms, expected_device_ms * 1e-3);

  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemFree(b));
  ASSERT_CU(cuEventDestroy(start));
  ASSERT_CU(cuEventDestroy(middle));
  ASSERT_CU(cuEventDestroy(end));
  ASSERT_CU(cuStreamDestroy(stream));
}

// A wait for an event whose record simcuda has already run still orders the waiting stream in
// modeled time: its work starts no earlier than the record, however fast simcuda's threads ran.
TEST_F(StreamTest, AWaitForAnEventAlreadyReachedKeepsTheModeledOrder) {
  constexpr size_t kBytes = 100 * kMiB;  // ~1.9 ms over the modeled link
  CUstream producer = nullptr, consumer = nullptr;
  ASSERT_CU(cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
  CUevent uploaded = nullptr, start = nullptr, end = nullptr;
  ASSERT_CU(cuEventCreate(&uploaded, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&end, CU_EVENT_DEFAULT));
  CUdeviceptr target = 0;
  ASSERT_CU(cuMemAlloc(&target, kBytes));
  std::vector<unsigned char> host(kBytes, 1);
  ASSERT_CU(cuEventRecord(start, consumer));
  ASSERT_CU(cuMemcpyHtoDAsync(target, host.data(), kBytes, producer));
  ASSERT_CU(cuEventRecord(uploaded, producer));
  // Another thread's wait: simcuda runs the record, and this thread's modeled clock stays put.
  std::thread([&] { EXPECT_CU(cuEventSynchronize(uploaded)); }).join();
  ASSERT_CU(cuStreamWaitEvent(consumer, uploaded, 0));
  ASSERT_CU(cuEventRecord(end, consumer));
  ASSERT_CU(cuEventSynchronize(end));
  float waited_ms = 0;
  ASSERT_CU(cuEventElapsedTime(&waited_ms, start, end));
  EXPECT_GT(waited_ms, 1.5f) << "modeled: the consumer waited for the upload";
  ASSERT_CU(cuMemFree(target));
  for (CUevent event : {uploaded, start, end}) ASSERT_CU(cuEventDestroy(event));
  ASSERT_CU(cuStreamDestroy(producer));
  ASSERT_CU(cuStreamDestroy(consumer));
}

// cuStreamWriteValue32/64 write in stream order, through every export (cudart hands out the
// per-thread form of the 11.7 ABI, which cuda.h does not declare).
TEST_F(StreamTest, StreamWriteValuesLandInStreamOrder) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr words = 0;
  ASSERT_CU(cuMemAlloc(&words, 32));
  ASSERT_CU(cuMemsetD32Async(words, 0, 8, stream));
  ASSERT_CU(cuStreamWriteValue32(stream, words, 0xA1, 0));
  ASSERT_CU(cuStreamWriteValue64(stream, words + 8, 0x1122334455667788ull,
                                 CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
  using WriteValue32 = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  WriteValue32 per_thread = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  ASSERT_CU(cuGetProcAddress("cuStreamWriteValue32", reinterpret_cast<void**>(&per_thread), 12000,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
  ASSERT_NE(per_thread, nullptr);
  ASSERT_CU(per_thread(stream, words + 16, 0xB2, 0));
  ASSERT_CU(cuStreamSynchronize(stream));
  uint32_t back[6] = {};
  ASSERT_CU(cuMemcpyDtoH(back, words, sizeof back));
  EXPECT_EQ(back[0], 0xA1u);
  EXPECT_EQ(back[1], 0u);
  EXPECT_EQ(back[2], 0x55667788u);
  EXPECT_EQ(back[3], 0x11223344u);
  EXPECT_EQ(back[4], 0xB2u);
  EXPECT_EQ(back[5], 0u);
  EXPECT_EQ(cuStreamWriteValue32(stream, words + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue64(stream, words + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32(stream, words, 1, 0x80), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemFree(words));
  ASSERT_CU(cuStreamDestroy(stream));
}

// Stream memory operations on 16 zeroed words, on a stream of their own.
class StreamValueTest : public StreamTest {
 protected:
  void SetUp() override {
    StreamTest::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuMemAlloc(&words_, 64));
    ASSERT_CU(cuMemsetD32(words_, 0, 16));
    ASSERT_CU(cuCtxSynchronize());  // the memset is asynchronous to the host, on the legacy stream
  }
  void TearDown() override {
    EXPECT_CU(cuMemFree(words_));
    EXPECT_CU(cuStreamDestroy(stream_));
    StreamTest::TearDown();
  }
  CUstream stream_ = nullptr;
  CUdeviceptr words_ = 0;
};

// Note [Waiting for a value]: a wait holds its stream until another stream's write meets it, and
// the waiting stream's later work, in modeled time too, comes after that write.
TEST_F(StreamValueTest, AWaitHoldsItsStreamUntilTheValueIsWritten) {
  CUstream writing = nullptr;
  ASSERT_CU(cuStreamCreate(&writing, CU_STREAM_NON_BLOCKING));
  CUevent start = nullptr, written = nullptr, after = nullptr;
  for (CUevent* event : {&start, &written, &after})
    ASSERT_CU(cuEventCreate(event, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventRecord(start, writing));
  ASSERT_CU(cuStreamWaitValue32(stream_, words_, 7, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(cuStreamWriteValue32(stream_, words_ + 4, 1, 0));  // runs once the wait is met
  ASSERT_CU(cuEventRecord(after, stream_));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  // The writer first spends modeled time on a memset, so the write lands later there.
  CUdeviceptr big = 0;
  ASSERT_CU(cuMemAlloc(&big, 64 << 20));
  ASSERT_CU(cuMemsetD32Async(big, 0, (64 << 20) / 4, writing));
  ASSERT_CU(cuStreamWriteValue32(writing, words_, 8, 0));  // GEQ 7: met
  ASSERT_CU(cuEventRecord(written, writing));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuEventSynchronize(written));  // recorded after the write, which the wait saw
  uint32_t back[2] = {};
  ASSERT_CU(cuMemcpyDtoH(back, words_, sizeof back));
  EXPECT_EQ(back[0], 8u);
  EXPECT_EQ(back[1], 1u);
  float to_written = 0, to_after = 0;
  ASSERT_CU(cuEventElapsedTime(&to_written, start, written));
  ASSERT_CU(cuEventElapsedTime(&to_after, start, after));
  EXPECT_GT(to_written, 0.0f) << "the memset takes modeled time";
  EXPECT_GE(to_after, to_written) << "the waiting stream goes on after the write, modeled";
  for (CUevent event : {start, written, after}) ASSERT_CU(cuEventDestroy(event));
  ASSERT_CU(cuMemFree(big));
  ASSERT_CU(cuStreamDestroy(writing));
}

TEST_F(StreamValueTest, WaitConditionsFollowTheDriver) {
  ASSERT_CU(cuStreamWriteValue32(stream_, words_, 0xFFFFFFF0u, 0));
  ASSERT_CU(cuStreamWriteValue64(stream_, words_ + 8, 0x0F, 0));
  // Each is already met, so the stream runs through: GEQ is cyclic (0xFFFFFFF0 - 0xFFFFFF00 is
  // not negative), AND wants a common bit, NOR a bit set in neither.
  ASSERT_CU(cuStreamWaitValue32(stream_, words_, 0xFFFFFF00u, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(cuStreamWaitValue32(stream_, words_, 0xFFFFFFF0u, CU_STREAM_WAIT_VALUE_EQ));
  ASSERT_CU(cuStreamWaitValue32(stream_, words_, 0x10, CU_STREAM_WAIT_VALUE_AND));
  ASSERT_CU(cuStreamWaitValue32(stream_, words_, 0x0, CU_STREAM_WAIT_VALUE_NOR));
  ASSERT_CU(cuStreamWaitValue64(stream_, words_ + 8, 0x0E, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(cuStreamWaitValue64(stream_, words_ + 8, 0xF0, CU_STREAM_WAIT_VALUE_NOR));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(cuStreamWaitValue32(stream_, words_ + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue64(stream_, words_ + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32(stream_, words_, 1, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32(stream_, words_, 1, CU_STREAM_WAIT_VALUE_FLUSH),
            CUDA_ERROR_NOT_SUPPORTED);
}

// A batch runs its operations in order, as one piece of work.
TEST_F(StreamValueTest, ABatchOfMemoryOperationsRunsInOrder) {
  CUstreamBatchMemOpParams operations[4] = {};
  operations[0].writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_32, words_, {3}, 0, 0};
  operations[1].waitValue = {CU_STREAM_MEM_OP_WAIT_VALUE_32, words_, {3}, CU_STREAM_WAIT_VALUE_EQ,
                             0};
  operations[2].memoryBarrier = {CU_STREAM_MEM_OP_BARRIER, CU_STREAM_MEMORY_BARRIER_TYPE_GPU};
  operations[3].writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_64, words_ + 8, {}, 0, 0};
  operations[3].writeValue.value64 = 0x1122334455667788ull;
  ASSERT_CU(cuStreamBatchMemOp(stream_, 4, operations, 0));
  ASSERT_CU(cuStreamSynchronize(stream_));
  uint64_t back[2] = {};
  ASSERT_CU(cuMemcpyDtoH(back, words_, sizeof back));
  EXPECT_EQ(back[0], 3u);
  EXPECT_EQ(back[1], 0x1122334455667788ull);
  EXPECT_EQ(cuStreamBatchMemOp(stream_, 0, operations, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBatchMemOp(stream_, 4, operations, 1), CUDA_ERROR_INVALID_VALUE);
  operations[0].operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
  EXPECT_EQ(cuStreamBatchMemOp(stream_, 1, operations, 0), CUDA_ERROR_NOT_SUPPORTED);
  const uint32_t unknown = 99;  // no operation of cuda.h's, written as a program could
  std::memcpy(&operations[0], &unknown, sizeof unknown);
  EXPECT_EQ(cuStreamBatchMemOp(stream_, 1, operations, 0), CUDA_ERROR_INVALID_VALUE);
}

// Captured, a stream memory operation is a batch memory operation node, as on the driver, whose
// operations the shim reads (Note [Reading a graph] in shim/core/graph_uses.h).
TEST_F(StreamValueTest, ACapturedOperationIsABatchMemoryOperationNode) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ASSERT_CU(cuStreamWriteValue32(stream_, words_, 5, 0));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphNode node = nullptr;
  size_t count = 1;
  ASSERT_CU(cuGraphGetNodes(graph, &node, &count));
  ASSERT_EQ(count, 1u);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphNodeGetType(node, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  CUDA_BATCH_MEM_OP_NODE_PARAMS params{};
  ASSERT_CU(cuGraphBatchMemOpNodeGetParams(node, &params));
  ASSERT_EQ(params.count, 1u);
  EXPECT_EQ(params.paramArray[0].operation, CU_STREAM_MEM_OP_WRITE_VALUE_32);
  EXPECT_EQ(params.paramArray[0].writeValue.address, words_);
  EXPECT_EQ(params.paramArray[0].writeValue.value, 5u);
  EXPECT_EQ(cuGraphMemsetNodeGetParams(node, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(graph));
}

// A wait that nothing will meet does not hang its context's destruction here (on a GPU it would).
TEST_F(StreamTest, AWaitNeverMetEndsWithItsContext) {
  CUcontext own = nullptr;
  ASSERT_CU(cuCtxCreate(&own, nullptr, 0, device_));
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr word = 0;
  ASSERT_CU(cuMemAlloc(&word, 4));
  ASSERT_CU(cuMemsetD32(word, 0, 1));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuStreamWaitValue32(stream, word, 1, CU_STREAM_WAIT_VALUE_EQ));
  EXPECT_CU(cuCtxDestroy(own));
}

TEST_F(StreamTest, ElapsedTimeErrorsFollowTheDriver) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent timed = nullptr, untimed = nullptr, unrecorded = nullptr;
  ASSERT_CU(cuEventCreate(&timed, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&unrecorded, CU_EVENT_BLOCKING_SYNC));
  EXPECT_CU(cuEventQuery(unrecorded));  // an unrecorded event stands for no work
  EXPECT_CU(cuEventSynchronize(unrecorded));
  float ms = 0;
  {
    Gate gate;
    ASSERT_CU(cuEventRecord(timed, stream));
    ASSERT_CU(gate.block(stream));
    ASSERT_CU(cuEventRecord(untimed, stream));
    ASSERT_CU(cuEventRecord(unrecorded, stream));
    EXPECT_EQ(cuEventElapsedTime(&ms, timed, unrecorded), CUDA_ERROR_NOT_READY);
    gate.open();
    ASSERT_CU(cuStreamSynchronize(stream));
  }
  EXPECT_CU(cuEventElapsedTime(&ms, timed, unrecorded));
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cuEventElapsedTime(&ms, timed, untimed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime(nullptr, timed, unrecorded), CUDA_ERROR_INVALID_VALUE);
  CUevent fresh = nullptr;
  ASSERT_CU(cuEventCreate(&fresh, CU_EVENT_DEFAULT));
  EXPECT_EQ(cuEventElapsedTime(&ms, timed, fresh), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventCreate(&fresh, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(&fresh, 0x100), CUDA_ERROR_INVALID_VALUE);
  for (CUevent event : {timed, untimed, unrecorded}) ASSERT_CU(cuEventDestroy(event));
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(StreamTest, InvalidHandlesAndNullArgumentsGetTheDriversErrors) {
  auto* bogus_stream = reinterpret_cast<CUstream>(uintptr_t{0xdead0});
  auto* bogus_event = reinterpret_cast<CUevent>(uintptr_t{0xbeef0});
  EXPECT_EQ(cuStreamSynchronize(bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamQuery(bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(bogus_event), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventSynchronize(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy(bogus_event), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchHostFunc(nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamGetFlags(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamGetPriority(bogus_stream, nullptr), CUDA_ERROR_INVALID_VALUE);

  CUevent event = nullptr;
  ASSERT_CU(cuEventCreate(&event, CU_EVENT_DEFAULT));
  EXPECT_EQ(cuEventRecord(event, bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecordWithFlags(event, nullptr, CU_EVENT_RECORD_EXTERNAL),
            CUDA_ERROR_INVALID_VALUE);  // external records exist only in capture
  ASSERT_CU(cuEventDestroy(event));
  EXPECT_EQ(cuEventDestroy(event), CUDA_ERROR_INVALID_HANDLE);

  ASSERT_CU(cuCtxSetCurrent(nullptr));
  CUstream stream = nullptr;
  EXPECT_EQ(cuStreamCreate(&stream, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_INVALID_CONTEXT);
}

// Events and streams die with their context; their handles are then refused, not followed.
TEST_F(StreamTest, HandlesOfADestroyedContextAreInvalid) {
  CUcontext other = nullptr;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, device_));
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_DEFAULT));
  ASSERT_CU(cuEventCreate(&event, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventRecord(event, stream));
  EXPECT_EQ(cuEventRecord(event, nullptr), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));  // back to the primary context, leaving the stack as found
  ASSERT_EQ(popped, other);
  EXPECT_EQ(cuEventRecord(event, nullptr), CUDA_ERROR_INVALID_HANDLE);  // another context's
  ASSERT_CU(cuCtxDestroy(other));
  EXPECT_EQ(cuEventQuery(event), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamQuery(stream), CUDA_ERROR_INVALID_HANDLE);
}

// How many of the process's mappings are the size of a thread stack (give or take its guard
// page). Counting these rather than VmSize leaves out the C library's per-thread malloc arenas
// (64 MiB of address space each, kept for the life of the process), whose number depends on how
// the threads happened to overlap.
int stack_sized_mappings(size_t stack_bytes) {
  constexpr uint64_t kSlack = 64 * 1024;
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    const size_t dash = line.find('-');
    const uint64_t begin = std::stoull(line.substr(0, dash), nullptr, 16);
    const uint64_t end = std::stoull(line.substr(dash + 1), nullptr, 16);
    if (end - begin + kSlack >= stack_bytes && end - begin <= stack_bytes + kSlack) ++count;
  }
  return count;
}

void CUDA_CB count_call(void* calls) { static_cast<std::atomic<int>*>(calls)->fetch_add(1); }

// cuStreamDestroy returns at once and the work queued still runs; then the stream's worker thread
// goes away (Note [Stream workers]). A worker left finished but unjoined keeps its stack mapped
// for the rest of the process: a program that creates and destroys streams as it goes would map
// one more stack per stream, until thread creation fails.
TEST_F(StreamTest, DestroyedStreamsGiveTheirThreadsBack) {
  pthread_attr_t defaults;
  ASSERT_EQ(pthread_getattr_default_np(&defaults), 0);
  size_t stack_bytes = 0;
  ASSERT_EQ(pthread_attr_getstacksize(&defaults, &stack_bytes), 0);
  pthread_attr_destroy(&defaults);

  constexpr int kStreams = 64;
  std::atomic<int> calls{0};
  const int before = stack_sized_mappings(stack_bytes);
  for (int i = 0; i < kStreams; ++i) {
    CUstream stream = nullptr;
    ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuLaunchHostFunc(stream, count_call, &calls));
    ASSERT_CU(cuStreamDestroy(stream));
  }
  ASSERT_CU(cuCtxSynchronize());  // destroyed streams included
  EXPECT_EQ(calls.load(), kStreams);
  // The workers return in their own time once their queues are empty; then at most a few stacks
  // stay mapped (the C library keeps some for reuse), far fewer than one per stream.
  const int limit = before + kStreams / 2;
  const auto stacks_given_back = [&] {
    return stack_sized_mappings(stack_bytes) < limit ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  };
  EXPECT_EQ(eventually(stacks_given_back), CUDA_SUCCESS)
      << stack_sized_mappings(stack_bytes) - before << " more stack-sized mappings after "
      << kStreams << " streams came and went, with " << stack_bytes / kMiB
      << " MiB per thread stack";
}

}  // namespace
