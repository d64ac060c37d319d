// Helpers for tests of asynchronous behaviour: a gate that holds a stream, and polling with a
// bound so that a test which fails hangs for seconds, not forever.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

// A host function that blocks its stream until the test opens the gate. Whatever is queued
// behind it cannot run, which makes ordering observable without timing assumptions.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  // Opens the gate and waits until every host function it queued has returned.
  ~Gate() {
    open();
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return finished_ == queued_; });
  }

  // `launch` is cuLaunchHostFunc or one of its per-thread variants.
  CUresult block(CUstream stream,
                 CUresult (*launch)(CUstream, CUhostFn, void*) = cuLaunchHostFunc) {
    {
      std::lock_guard lock(mutex_);
      ++queued_;
    }
    const CUresult result = launch(stream, &Gate::hold, this);
    if (result != CUDA_SUCCESS) {
      std::lock_guard lock(mutex_);
      --queued_;
    }
    return result;
  }

  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  static void CUDA_CB hold(void* self) {
    auto* gate = static_cast<Gate*>(self);
    std::unique_lock lock(gate->mutex_);
    gate->changed_.wait(lock, [&] { return gate->open_; });
    ++gate->finished_;
    gate->changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
  int queued_ = 0;
  int finished_ = 0;
};

// Polls `query` (cuEventQuery, cuStreamQuery) until it stops answering CUDA_ERROR_NOT_READY, for
// at most ten seconds; returns its last answer.
inline CUresult eventually(const std::function<CUresult()>& query) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  CUresult result = query();
  while (result == CUDA_ERROR_NOT_READY && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    result = query();
  }
  return result;
}

// Checks that `query` keeps answering CUDA_ERROR_NOT_READY for a while. Used only where the work
// cannot complete (it sits behind a closed Gate), so the check cannot be flaky.
inline void expect_stays_not_ready(const std::function<CUresult()>& query) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(query(), CUDA_ERROR_NOT_READY);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// A driver function's per-thread-default-stream export, as a program built with
// --default-stream per-thread gets it.
template <typename Function>
Function per_thread_export(const char* name, Function) {
  void* function = nullptr;
  CUdriverProcAddressQueryResult status{};
  const CUresult result = cuGetProcAddress(name, &function, CUDA_VERSION,
                                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status);
  EXPECT_EQ(result, CUDA_SUCCESS) << name;
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name;
  return reinterpret_cast<Function>(function);
}
#define PER_THREAD(function) per_thread_export(#function, &function)
