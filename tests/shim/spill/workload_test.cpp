// Oversubscription with byte-exact results (issue item 9): many 4 MiB cuMemAlloc blocks, 2x and
// 4x simcuda's VRAM in all, written by kernels, by cuMemcpyHtoD and by cuMemsetD32, combined by
// kernels that read one block and write another (device-resident with spilled, spilled with
// spilled, interior pointers), then every byte read back with cuMemcpyDtoH.
//
// The same program runs in each spill mode (CMakeLists.txt), over the budget (budget below the
// device) and with the driver itself out of memory while the budget has room
// (SPILL_HIDDEN_VRAM_MIB). With spilling off, the first block past the budget must be refused:
// that run shows the workload really oversubscribes, so the others cannot pass without
// spilling.
#include <algorithm>
#include <cstdio>

#include "spill_support.h"

namespace {

using spill::bits_of;
using spill::kBlock;
using spill::Tier;
using spill::tier_name;
using spill::tier_of;

constexpr size_t kWords = kBlock / sizeof(uint32_t);

// Block i's words after the fill phase.
float initial(size_t i, size_t j) {
  if (i % 2 == 0) return static_cast<float>((i * 131 + j) % 4096);              // cuMemcpyHtoD
  if (i % 4 == 3 && j >= kWords * 3 / 4) return static_cast<float>(7 + i % 5);  // cuMemsetD32
  return j < kWords / 2 ? static_cast<float>(i % 97 + 1)      // vs_fill_u32 over the block
                        : static_cast<float>(i % 89 + 1000);  // then over its second half
}

class Workload : public spill::SpillTest {
 protected:
  void run(size_t multiple) {
    const size_t count = multiple * vram_ / kBlock;
    const size_t on_device = device_capacity(kBlock);
    ASSERT_LT(on_device, count);
    std::printf("%zu blocks of 4 MiB (%zux the device's %zu MiB), %zu fit on the device\n", count,
                multiple, vram_ / spill::kMiB, on_device);

    std::vector<CUdeviceptr> blocks;
    for (size_t i = 0; i < count; ++i) {
      CUdeviceptr pointer = 0;
      const CUresult result = cuMemAlloc(&pointer, kBlock);
      if (spill::spilling_off() && i == on_device) {
        // The negative control: without spilling, this workload cannot run.
        EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
        EXPECT_EQ(pointer, 0u);
        free_all(blocks);
        EXPECT_EQ(free_bytes(), expected_free(0));
        return;
      }
      ASSERT_CU(result) << "block " << i;
      blocks.push_back(pointer);
    }
    ASSERT_FALSE(spill::spilling_off())
        << "with spilling off, block " << on_device << " should have been refused";

    // The first blocks fill the device; every later one spilled, to the configured tier.
    size_t spilled = 0;
    for (size_t i = 0; i < count; ++i) {
      const Tier tier = tier_of(blocks[i]);
      const Tier expected = i < on_device ? Tier::kDevice : spill::expected_tier();
      ASSERT_EQ(tier, expected) << "block " << i << " is " << tier_name(tier) << ", expected "
                                << tier_name(expected);
      spilled += tier != Tier::kDevice ? 1 : 0;
    }
    EXPECT_EQ(spilled, count - on_device);
    EXPECT_EQ(free_bytes(), expected_free(on_device * kBlock)) << "spilled bytes count as device";

    // Fill: cuMemcpyHtoD for even blocks, two vs_fill_u32 kernels for odd ones (the second from
    // an interior pointer), then cuMemsetD32 over the last quarter of every fourth.
    std::vector<uint32_t> host(kWords);
    for (size_t i = 0; i < count; i += 2) {
      for (size_t j = 0; j < kWords; ++j) host[j] = bits_of(initial(i, j));
      ASSERT_CU(cuMemcpyHtoD(blocks[i], host.data(), kBlock));
    }
    for (size_t i = 1; i < count; i += 2) {
      ASSERT_CU(fill(blocks[i], bits_of(initial(i, 0)), kWords, stream_));
      ASSERT_CU(fill(blocks[i] + kBlock / 2, bits_of(initial(i, kWords / 2)), kWords / 2, stream_));
    }
    ASSERT_CU(cuStreamSynchronize(stream_));
    for (size_t i = 3; i < count; i += 4) {
      ASSERT_CU(
          cuMemsetD32(blocks[i] + kBlock * 3 / 4, bits_of(initial(i, kWords - 1)), kWords / 4));
    }
    ASSERT_CU(cuCtxSynchronize());

    // Compute, in stream order: y = 2x + y with y the first half of the blocks and x the second
    // half mirrored, then the second quarter of each y copied over the first quarter of its x.
    const size_t half = count / 2;
    for (size_t k = 0; k < half; ++k)
      ASSERT_CU(axpy(blocks[k], blocks[count - 1 - k], 2.0F, kWords, stream_));
    for (size_t k = 0; k < half; ++k)
      ASSERT_CU(copy(blocks[count - 1 - k], blocks[k] + kBlock / 4, kBlock / 4, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));

    const auto after_axpy = [&](size_t k, size_t j) {
      return 2.0F * initial(count - 1 - k, j) + initial(k, j);
    };
    const auto expected = [&](size_t i, size_t j) {
      if (i < half) return bits_of(after_axpy(i, j));
      if (j < kWords / 4) return bits_of(after_axpy(count - 1 - i, j + kWords / 4));
      return bits_of(initial(i, j));
    };
    std::vector<uint32_t> scratch;
    for (size_t i = 0; i < count; ++i) {
      const size_t at = first_mismatch(
          blocks[i], kWords, [&](size_t j) { return expected(i, j); }, scratch);
      ASSERT_EQ(at, kWords) << "block " << i << " (" << tier_name(tier_of(blocks[i])) << "): word "
                            << at << " is " << std::hex << scratch[at] << ", expected "
                            << expected(i, at);
      // A spilled block is host memory: the host reads the same bytes through the pointer.
      if (i >= on_device) {
        void* host_pointer = nullptr;
        ASSERT_CU(
            cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, blocks[i]));
        ASSERT_EQ(reinterpret_cast<CUdeviceptr>(host_pointer), blocks[i]);
        const auto* words = static_cast<const uint32_t*>(host_pointer);
        EXPECT_EQ(words[0], expected(i, 0)) << "block " << i;
        EXPECT_EQ(words[kWords - 1], expected(i, kWords - 1)) << "block " << i;
      }
    }

    free_all(blocks);
    EXPECT_EQ(free_bytes(), expected_free(0));
  }
};

TEST_F(Workload, TwiceTheDevice) { run(2); }
TEST_F(Workload, FourTimesTheDevice) { run(4); }

}  // namespace
