// For a test program that checks what code does when one of its own allocations fails: replaces
// the global operator new so that, while armed, the allocation numbered `failing` on this thread
// throws std::bad_alloc, and runs a check once per allocation in turn, each in a child process.
// Include it from one source file of a program of its own: the replacement touches every test in
// the program.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>

namespace vramspill::testing {
// Allocations counted on this thread while armed; the one numbered `failing` throws.
inline thread_local bool allocations_armed = false;
inline thread_local uint64_t allocations_counted = 0;
inline thread_local uint64_t failing_allocation = 0;

// Arms the count for its lifetime, the `nth` allocation failing; failed() says whether it came.
class NthAllocationFails {
 public:
  explicit NthAllocationFails(uint64_t nth) noexcept {
    allocations_counted = 0;
    failing_allocation = nth;
    allocations_armed = true;
  }
  ~NthAllocationFails() { allocations_armed = false; }
  NthAllocationFails(const NthAllocationFails&) = delete;
  NthAllocationFails& operator=(const NthAllocationFails&) = delete;

  bool failed() const noexcept { return allocations_counted >= failing_allocation; }
};

// The exit status of a child whose armed run made fewer allocations than the one meant to fail:
// every allocation has had its turn.
inline constexpr int kNoAllocationFailed = 100;

// Runs `run(nth)` in a child process for nth = 1, 2, ... until it returns kNoAllocationFailed;
// any other status must be 0, else the test fails with `describe(status)`. A child ended by a
// signal is skipped: a fake's noexcept call whose allocation failed ends it by std::terminate(),
// which says nothing of the code under test. Fails the test if no run got past that.
inline void fail_each_allocation_in_turn(const std::function<int(uint64_t)>& run,
                                         const std::function<std::string(int)>& describe) {
  int checked = 0;
  for (uint64_t nth = 1;; ++nth) {
    const pid_t child = fork();
    ASSERT_NE(child, -1);
    if (child == 0) {
      std::freopen("/dev/null", "w", stderr);  // the ended children's std::terminate() says why
      _exit(run(nth));
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    if (!WIFEXITED(status)) continue;
    const int ending = WEXITSTATUS(status);
    if (ending == kNoAllocationFailed) break;
    EXPECT_EQ(ending, 0) << "allocation " << nth << " failed: " << describe(ending);
    checked += ending == 0 ? 1 : 0;
  }
  EXPECT_GT(checked, 0) << "no allocation of the code under test failed";
}
}  // namespace vramspill::testing

// Not inlined: GCC would otherwise see free() meet operator new's pointer and warn of a mismatch
// (-Wmismatched-new-delete), which is exactly the pairing a replacement is allowed to make.
[[gnu::noinline]] void* operator new(std::size_t size) {
  using namespace vramspill::testing;
  if (allocations_armed && ++allocations_counted == failing_allocation) throw std::bad_alloc();
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* memory) noexcept { std::free(memory); }
[[gnu::noinline]] void operator delete(void* memory, std::size_t /*size*/) noexcept {
  std::free(memory);
}
