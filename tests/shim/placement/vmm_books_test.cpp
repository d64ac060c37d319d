// placement/vmm_books: the books of the program's VMM handles after cuMemCreate, over the real
// ledger and VMM tracker, with the driver's release and unmap as the test answers them: a
// handle's memory leaves the budget at its last release or its last unmap, whichever comes
// later (Note [VMM memory lives until its last mapping goes] in core/vmm_tracker.h), counts again
// when the driver refuses, and a host-located spill gives its host budget back when it goes.
#include "placement/vmm_books.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "admission_fakes.h"

namespace vramspill::placement {
namespace {

using core::Route;

constexpr uint64_t kAddress = 0x70000000;

class VmmBooksTest : public AdmissionFlowFixture {
 protected:
  // A device-located handle of `bytes`, made and recorded as cuMemCreate's hook does.
  uint64_t create(uint64_t bytes) {
    const uint64_t handle = next_handle_++;
    const core::Admission admission = ledger_.admit(0, Route::kMemCreate, bytes);
    EXPECT_TRUE(admission.admitted);
    books_.created(handle);
    ledger_.on_allocated(admission, handle, bytes);
    return handle;
  }
  // cuMemMap of `handle` at [address, address + bytes), which the driver makes.
  void map(uint64_t address, uint64_t bytes, uint64_t handle) {
    ASSERT_EQ(books_.map(address, bytes, handle, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  }
  uint64_t held() const { return ledger_.snapshot(0).held_bytes; }
  // The books' call `call_books` (given the driver's call as a function object), while the driver
  // answers which `other` runs on a thread of its own and has 100 ms to get in; the driver then
  // answers `driver_answer`. Note [One change to a handle at a time].
  template <typename CallBooks, typename Other>
  static CUresult while_the_driver_answers(CallBooks call_books, Other other,
                                           CUresult driver_answer) {
    std::thread racing;
    const CUresult result = call_books([&] {
      racing = std::thread(other);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the other call had its chance
      return driver_answer;
    });
    racing.join();
    return result;
  }
  // A release of `handle` the driver makes, as the other call.
  auto release_of(uint64_t handle) {
    return [this, handle] {
      EXPECT_EQ(books_.release(handle, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
    };
  }
  static auto answer(CUresult result) {
    return [result] { return result; };
  }

  VmmBooks books_{ledger_, vmm_, flow_, vmm_spill_, host_budget_};
  uint64_t next_handle_ = 0x9000;
};

TEST_F(VmmBooksTest, AHandleReleasedWhileMappedStaysCountedUntilItsLastUnmap) {
  const uint64_t handle = create(8 * kMiB);
  map(kAddress, 8 * kMiB, handle);
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 8 * kMiB) << "the mapping keeps the memory alive";
  ASSERT_EQ(books_.unmap(kAddress, 8 * kMiB, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
  EXPECT_FALSE(ledger_.find(handle, core::KeySpace::kVmmHandle).has_value());
}

TEST_F(VmmBooksTest, AnUnmappedHandleLeavesAtItsLastRelease) {
  const uint64_t handle = create(4 * kMiB);
  ASSERT_EQ(books_.retain(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 4 * kMiB) << "one reference is left";
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
}

TEST_F(VmmBooksTest, WhatTheDriverRefusesStaysCounted) {
  const uint64_t handle = create(4 * kMiB);
  EXPECT_EQ(books_.release(handle, answer(CUDA_ERROR_INVALID_VALUE)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(held(), 4 * kMiB);
  map(kAddress, 4 * kMiB, handle);
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(books_.unmap(kAddress, 4 * kMiB, answer(CUDA_ERROR_INVALID_CONTEXT)),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(held(), 4 * kMiB) << "the mapping is back in the books";
  ASSERT_EQ(books_.unmap(kAddress, 4 * kMiB, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
}

TEST_F(VmmBooksTest, AHostLocatedSpillGivesItsHostBudgetBackWhenItGoes) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  const VmmSpillRequest request{.device = 0, .bytes = 16 * kMiB, .prop = &prop, .flags = 0};
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(vmm_spill_.spill(request, "over budget", &handle), CUDA_SUCCESS);
  ASSERT_EQ(host_budget_.used(), 16 * kMiB);
  map(kAddress, 16 * kMiB, handle);
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(host_budget_.used(), 16 * kMiB) << "still mapped";
  ASSERT_EQ(books_.unmap(kAddress, 16 * kMiB, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(host_budget_.used(), 0u);
  EXPECT_EQ(recorded(ledger_, Route::kSpillVmmHost).live_bytes, 0u);
}

// Note [One change to a handle at a time]: a release on another thread while an unmap of the
// handle's last mapping is with the driver waits for the driver's answer; here the driver refuses
// the unmap, so the mapping is back and the release must leave the memory counted.
TEST_F(VmmBooksTest, AReleaseWaitsForAnUnmapTheDriverIsAnswering) {
  const uint64_t handle = create(8 * kMiB);
  map(kAddress, 8 * kMiB, handle);
  EXPECT_EQ(while_the_driver_answers(
                [&](auto driver) { return books_.unmap(kAddress, 8 * kMiB, driver); },
                release_of(handle), CUDA_ERROR_INVALID_VALUE),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(held(), 8 * kMiB) << "the still mapped memory left the books";
  ASSERT_EQ(books_.unmap(kAddress, 8 * kMiB, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
}

// ... an unmap of a handle's last mapping waits for a retain the driver is answering: the
// reference it adds keeps the memory, which stays counted.
TEST_F(VmmBooksTest, AnUnmapWaitsForARetainTheDriverIsAnswering) {
  const uint64_t handle = create(8 * kMiB);
  map(kAddress, 8 * kMiB, handle);
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);  // the mapping keeps it
  EXPECT_EQ(while_the_driver_answers(
                [&](auto driver) { return books_.retain(handle, driver); },
                [&] {
                  EXPECT_EQ(books_.unmap(kAddress, 8 * kMiB, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
                },
                CUDA_SUCCESS),
            CUDA_SUCCESS);
  EXPECT_EQ(held(), 8 * kMiB) << "the retained memory left the books";
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
}

// ... and a release of a handle's last reference waits for a map the driver is answering.
TEST_F(VmmBooksTest, AReleaseWaitsForAMapTheDriverIsAnswering) {
  const uint64_t handle = create(8 * kMiB);
  EXPECT_EQ(while_the_driver_answers(
                [&](auto driver) { return books_.map(kAddress, 8 * kMiB, handle, driver); },
                release_of(handle), CUDA_SUCCESS),
            CUDA_SUCCESS);
  EXPECT_EQ(held(), 8 * kMiB) << "the mapped memory left the books";
  ASSERT_EQ(books_.unmap(kAddress, 8 * kMiB, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(held(), 0u);
}

// Note [The program's host-located handles]: counted against the host limit, never refused,
// from cuMemCreate until the driver frees the memory; a refused call keeps the charge.
TEST_F(VmmBooksTest, AProgramsHostLocatedHandleCountsAgainstTheHostLimitWhileItLives) {
  const uint64_t handle = next_handle_++;
  books_.created_on_host(handle, 32 * kMiB);
  EXPECT_EQ(host_budget_.used(), 32 * kMiB);
  EXPECT_EQ(held(), 0u) << "no device memory";
  map(kAddress, 32 * kMiB, handle);
  ASSERT_EQ(books_.release(handle, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(host_budget_.used(), 32 * kMiB) << "still mapped";
  EXPECT_EQ(books_.unmap(kAddress, 32 * kMiB, answer(CUDA_ERROR_INVALID_CONTEXT)),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(host_budget_.used(), 32 * kMiB) << "the driver kept it";
  ASSERT_EQ(books_.unmap(kAddress, 32 * kMiB, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(host_budget_.used(), 0u);

  // Unmapped, it goes at its release; a value handed out again owes nothing to the old handle.
  const uint64_t again = next_handle_++;
  books_.created_on_host(again, 4 * kMiB);
  books_.created_on_host(again, 8 * kMiB);
  EXPECT_EQ(host_budget_.used(), 8 * kMiB);
  ASSERT_EQ(books_.release(again, answer(CUDA_SUCCESS)), CUDA_SUCCESS);
  EXPECT_EQ(host_budget_.used(), 0u);
}

}  // namespace
}  // namespace vramspill::placement
