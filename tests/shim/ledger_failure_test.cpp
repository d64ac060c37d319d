// The ledger when memory runs out inside it: it fails open (admits, forgets, keeps its figures)
// and counts an internal error, because the shim must never be the reason a job fails. This
// program replaces the global operator new so a test can make every allocation throw; it is a
// program of its own so that replacement touches no other test.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

#include "core/ledger.h"

namespace {
thread_local bool allocations_fail = false;

// Makes every operator new on this thread throw std::bad_alloc while it lives.
class FailAllocations {
 public:
  FailAllocations() { allocations_fail = true; }
  ~FailAllocations() { allocations_fail = false; }
  FailAllocations(const FailAllocations&) = delete;
  FailAllocations& operator=(const FailAllocations&) = delete;
};
}  // namespace

// Not inlined: GCC would otherwise see free() meet operator new's pointer and warn of a mismatch
// (-Wmismatched-new-delete), which is exactly the pairing a replacement is allowed to make.
[[gnu::noinline]] void* operator new(std::size_t size) {
  if (allocations_fail) throw std::bad_alloc();
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* memory) noexcept { std::free(memory); }
[[gnu::noinline]] void operator delete(void* memory, std::size_t /*size*/) noexcept {
  std::free(memory);
}

namespace vramspill::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(LedgerOutOfMemory, ARefusalThatCannotBeExplainedIsAdmitted) {
  Ledger ledger;
  ledger.set_device(0, 100 * kMiB, 10 * kMiB);
  Admission admission;
  {
    const FailAllocations fail;
    admission = ledger.admit(0, Route::kMemAlloc, 20 * kMiB);
  }
  EXPECT_TRUE(admission.admitted);
  EXPECT_EQ(admission.reserved_bytes, 20 * kMiB);
  EXPECT_EQ(ledger.internal_errors(), 1u);
  EXPECT_EQ(ledger.snapshot(0).over_budget, 0u);
  ledger.on_allocated(admission, 0x1000, 20 * kMiB);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 20 * kMiB);  // the truth, over the limit
  ASSERT_TRUE(ledger.on_freed(0x1000).has_value());
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
}

TEST(LedgerOutOfMemory, AnAllocationTheTableCannotHoldGoesUntracked) {
  Ledger ledger;
  ledger.set_device(0, 100 * kMiB, 10 * kMiB);
  const Admission admission = ledger.admit(0, Route::kMemAlloc, 4 * kMiB);
  ASSERT_TRUE(admission.admitted);
  {
    const FailAllocations fail;  // the shard's table is empty: its first insert must allocate
    ledger.on_allocated(admission, 0x1000, 4 * kMiB);
  }
  EXPECT_EQ(ledger.internal_errors(), 1u);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);  // the reservation was given back
  EXPECT_FALSE(ledger.on_freed(0x1000).has_value());
}

TEST(LedgerOutOfMemory, APoolFigureThatCannotBeStoredKeepsTheOldOne) {
  Ledger ledger;
  ledger.set_device(0, 100 * kMiB, 10 * kMiB);
  {
    const FailAllocations fail;
    ledger.set_pool_reserved(0, 0xb001, 8 * kMiB);
  }
  EXPECT_EQ(ledger.internal_errors(), 1u);
  EXPECT_EQ(ledger.snapshot(0).held_bytes, 0u);
  EXPECT_EQ(ledger.snapshot(0).pool_reserved_bytes, 0u);
}

TEST(LedgerOutOfMemory, TheSummaryIsEmptyRatherThanThrowing) {
  Ledger ledger;
  ledger.set_device(0, 100 * kMiB, 10 * kMiB);
  std::string line = "unchanged";
  {
    const FailAllocations fail;
    line = ledger.summary_line();
  }
  EXPECT_TRUE(line.empty());
  EXPECT_GE(ledger.internal_errors(), 1u);  // devices() may count its own failure too
  EXPECT_FALSE(ledger.summary_line().empty());
}

}  // namespace
}  // namespace vramspill::core
