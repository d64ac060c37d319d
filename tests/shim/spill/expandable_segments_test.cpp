// What PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) do with
// the driver, past the budget (issue 26): one large VA reservation, grown by 20 MiB handles that
// ask for GPUDirect RDMA and for POSIX file descriptors, each mapped right after the last and
// given device access; shrunk by unmapping and releasing the tail handles; grown again. Every
// byte is written and checked through kernels and copies that cross from device-located handles
// into host-located ones. Handles that fit under the budget are device memory and the rest are
// host-located VMM memory, made without the RDMA flag (Note [Host-located VMM spills] in
// shim/placement/vmm_spill.h), in every mode but off; the driver's own answer says which.
//
// In tiered mode (VRAMSPILL_SPILL_MODE=tiered) two tiered blocks take half the budget first: the
// handles must evict them rather than go to the host while eviction can make room, and the
// blocks keep their bytes on the host. CMakeLists.txt sets the environment and checks the log.
#include <algorithm>
#include <string_view>

#include "spill_support.h"

namespace {

using spill::kMiB;
using spill::pattern;

// PyTorch's handle size on an H200 (GPU-FACTS.md), rounded up to the granularity the driver
// asks for, and how many handles the reservation holds.
constexpr size_t kPyTorchHandle = 20 * kMiB;
constexpr size_t kMaxHandles = 6;
// Tiered mode's blocks, taken before the segment grows.
constexpr size_t kTieredBlock = 16 * kMiB;
constexpr size_t kTieredBlocks = 2;

bool tiered_mode() {
  const char* mode = std::getenv("VRAMSPILL_SPILL_MODE");
  return mode != nullptr && std::string_view(mode) == "tiered";
}

// A device-located request as PyTorch makes it.
CUmemAllocationProp segment_prop(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.allocFlags.gpuDirectRDMACapable = 1;
  return prop;
}

class ExpandableSegment : public spill::SpillTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SpillTest::SetUp());
    const CUmemAllocationProp prop = segment_prop(device_);
    size_t granularity = 0;
    ASSERT_CU(cuMemGetAllocationGranularity(&granularity, &prop,
                                            CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    ASSERT_GT(granularity, 0u);
    handle_bytes_ = (kPyTorchHandle + granularity - 1) / granularity * granularity;
    ASSERT_CU(cuMemAddressReserve(&segment_, kMaxHandles * handle_bytes_, 0, 0, 0));
  }

  void TearDown() override {
    shrink(0);
    if (segment_ != 0) {
      EXPECT_CU(cuMemAddressFree(segment_, kMaxHandles * handle_bytes_));
    }
    for (const CUdeviceptr block : tiered_blocks_) {
      EXPECT_CU(cuMemFree(block));
    }
    // Everything is back: the budget is whole again (tiered mode's arena keeps idle granules
    // for its next blocks, which count against it: [tiered] keep).
    if (!tiered_mode()) {
      EXPECT_EQ(free_bytes(), expected_free(0));
    }
    SpillTest::TearDown();
  }

  // Creates, maps and grants access to handles until the segment holds `count` of them.
  void grow(size_t count) {
    const CUmemAllocationProp prop = segment_prop(device_);
    while (handles_.size() < count) {
      CUmemGenericAllocationHandle handle = 0;
      ASSERT_CU(cuMemCreate(&handle, handle_bytes_, &prop, 0)) << "handle " << handles_.size();
      const CUdeviceptr at = end();
      ASSERT_CU(cuMemMap(at, handle_bytes_, 0, handle, 0));
      handles_.push_back(handle);
      CUmemAccessDesc access{};
      access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      ASSERT_CU(cuMemSetAccess(at, handle_bytes_, &access, 1));
    }
  }

  // Unmaps and releases the tail handles until `count` are left.
  void shrink(size_t count) {
    while (handles_.size() > count) {
      EXPECT_CU(cuMemUnmap(end() - handle_bytes_, handle_bytes_));
      EXPECT_CU(cuMemRelease(handles_.back()));
      handles_.pop_back();
    }
  }

  CUdeviceptr end() const { return segment_ + handles_.size() * handle_bytes_; }
  size_t words(size_t handles) const { return handles * handle_bytes_ / sizeof(uint32_t); }

  // Handles that fit under the budget are device memory, asked for RDMA; the rest host-located
  // VMM memory, made without the flag. `on_device`: how many of the segment's handles fit.
  void expect_locations(size_t on_device) {
    for (size_t i = 0; i < handles_.size(); ++i) {
      CUmemAllocationProp prop{};
      ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&prop, handles_[i]));
      const bool device = i < on_device;
      EXPECT_EQ(prop.location.type,
                device ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST_NUMA)
          << "handle " << i;
      EXPECT_EQ(prop.allocFlags.gpuDirectRDMACapable, device ? 1 : 0) << "handle " << i;
      EXPECT_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    }
  }

  // Writes `seed`'s pattern over the segment's words [from, to) with one copy that crosses
  // every handle between them.
  void write(uint32_t seed, size_t from, size_t to) {
    std::vector<uint32_t> words(to - from);
    for (size_t j = 0; j < words.size(); ++j) words[j] = pattern(seed, from + j);
    ASSERT_CU(cuMemcpyHtoD(segment_ + from * sizeof(uint32_t), words.data(),
                           words.size() * sizeof(uint32_t)));
  }

  // The first of the segment's words [from, to) that is not `expected(j)`, or `to`.
  template <typename Expected>
  size_t first_wrong(size_t from, size_t to, Expected expected) {
    std::vector<uint32_t> scratch;
    const size_t mismatch = first_mismatch(
        segment_ + from * sizeof(uint32_t), to - from,
        [&](size_t j) { return expected(from + j); }, scratch);
    return from + mismatch;
  }

  // Tiered blocks that take part of the budget, each filled with its own pattern.
  void take_tiered_blocks() {
    std::vector<uint32_t> words(kTieredBlock / sizeof(uint32_t));
    for (uint32_t b = 0; b < kTieredBlocks; ++b) {
      CUdeviceptr block = 0;
      ASSERT_CU(cuMemAlloc(&block, kTieredBlock));
      tiered_blocks_.push_back(block);
      for (size_t j = 0; j < words.size(); ++j) words[j] = pattern(100 + b, j);
      ASSERT_CU(cuMemcpyHtoD(block, words.data(), kTieredBlock));
    }
  }

  void expect_tiered_blocks_intact() {
    std::vector<uint32_t> scratch;
    const size_t count = kTieredBlock / sizeof(uint32_t);
    for (uint32_t b = 0; b < tiered_blocks_.size(); ++b) {
      EXPECT_EQ(first_mismatch(
                    tiered_blocks_[b], count, [b](size_t j) { return pattern(100 + b, j); },
                    scratch),
                count)
          << "tiered block " << b;
    }
  }

  size_t handle_bytes_ = 0;
  CUdeviceptr segment_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<CUdeviceptr> tiered_blocks_;
};

TEST_F(ExpandableSegment, GrowsPastTheBudgetShrinksAndGrowsAgainByteExact) {
  if (tiered_mode()) {
    ASSERT_NO_FATAL_FAILURE(take_tiered_blocks());
  }
  // How many handles fit under the budget: in tiered mode too, once the blocks are evicted.
  const size_t fit = std::min(budget_ / handle_bytes_, kMaxHandles);
  ASSERT_LT(fit, kMaxHandles) << "the segment must outgrow the budget";
  ASSERT_GT(fit, 1u) << "the test shrinks past a device-located handle";

  ASSERT_NO_FATAL_FAILURE(grow(kMaxHandles));
  ASSERT_NO_FATAL_FAILURE(expect_locations(fit));
  const size_t all = words(kMaxHandles);
  const size_t half = all / 2;
  // A kernel fills the whole segment; a copy writes a pattern over it; a kernel copies its first
  // half (device handles and host ones) over its second; every word is read back.
  ASSERT_CU(fill(segment_, 0x5eed5eedu, all, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(first_wrong(0, all, [](size_t) { return 0x5eed5eedu; }), all);
  ASSERT_NO_FATAL_FAILURE(write(1, 0, all));
  ASSERT_CU(copy(segment_ + half * sizeof(uint32_t), segment_, half * sizeof(uint32_t), stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(first_wrong(0, half, [](size_t j) { return pattern(1, j); }), half);
  EXPECT_EQ(first_wrong(half, all, [half](size_t j) { return pattern(1, j - half); }), all);

  // Shrink past a device-located handle: the budget has room for one again.
  const size_t kept = fit - 1;
  shrink(kept);
  const size_t kept_words = words(kept);
  EXPECT_EQ(first_wrong(0, kept_words, [](size_t j) { return pattern(1, j); }), kept_words);

  // Grow again: the next handle takes the room, the rest go to the host, and the words kept
  // stay as they were while the new ones are written by a kernel and a copy.
  ASSERT_NO_FATAL_FAILURE(grow(kMaxHandles));
  ASSERT_NO_FATAL_FAILURE(expect_locations(fit));
  ASSERT_CU(fill(segment_ + kept_words * sizeof(uint32_t), 0xabcd0123u, all - kept_words,
                 stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(first_wrong(kept_words, all, [](size_t) { return 0xabcd0123u; }), all);
  ASSERT_NO_FATAL_FAILURE(write(2, kept_words, all));
  EXPECT_EQ(first_wrong(0, all,
                        [kept_words](size_t j) {
                          return j < kept_words ? pattern(1, j) : pattern(2, j);
                        }),
            all);
  if (tiered_mode()) expect_tiered_blocks_intact();
}

}  // namespace
