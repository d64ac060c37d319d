// Peer access on simcuda (Note [Peer access] in tools/simcuda/src/core/peer_access.h): the
// driver's answers and errors, and kernels that reach another device's cuMemAlloc memory only
// with peer access, while managed and pinned host memory is reachable from every device.
//
// Two devices, set before cuInit. A kernel that faults poisons its context for good, so those
// cases run in a child process (EXPECT_EXIT; the "threadsafe" style re-executes the test binary,
// as stream worker threads are running), which prints what the driver returned and exits.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernel_test_support.h"

namespace {

[[maybe_unused]] const int kTwoDevices = setenv("SIMCUDA_DEVICES", "2", 1);

constexpr uint64_t kWords = 1024;
constexpr uint32_t kPattern = 0xC0FFEE00u;

class PeerAccessTest : public KernelFixture {
 protected:
  void TearDown() override {
    if (device1_context_ != nullptr) leave_device1();
    KernelFixture::TearDown();
  }

  // Creates a context on device 1 and makes it current, with vs_fill_u32 loaded in it (on a GPU,
  // a module belongs to the context that loads it).
  void enter_device1() {
    ASSERT_CU(cuCtxCreate(&device1_context_, nullptr, 0, 1));  // pushed: current
    ASSERT_CU(cuModuleLoadData(&device1_module_, "simcuda accepts any image"));
    ASSERT_CU(cuModuleGetFunction(&device1_fill_, device1_module_, "vs_fill_u32"));
  }
  // Destroys the device-1 context, which ends its peer access; device 0's primary context is
  // current again.
  void leave_device1() {
    EXPECT_CU(cuModuleUnload(device1_module_));
    EXPECT_CU(cuCtxDestroy(device1_context_));
    device1_context_ = nullptr;
  }
  CUresult fill_on_device1(CUdeviceptr dst, uint32_t value, uint64_t count) {
    void* params[] = {&dst, &value, &count};
    return cuLaunchKernel(device1_fill_, 4, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr);
  }
  // In a death-test child: allocates a block on device 0, enters device 1, runs `arrange(block)`
  // (which exits with a code of its own when a step fails), then fills the block from device 1
  // and reports the launch's and the synchronisation's results. Expects the stderr of the child
  // to match `expected`: by default, the launch queued and the kernel faulted (a sticky
  // CUDA_ERROR_ILLEGAL_ADDRESS).
  template <typename Arrange>
  void expect_fill_from_device1(Arrange arrange, const char* expected = kFaulted) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
          CUdeviceptr on_device0 = 0;
          if (cuMemAlloc(&on_device0, kWords * 4) != CUDA_SUCCESS) std::exit(2);
          enter_device1();
          arrange(on_device0);
          const CUresult launched = fill_on_device1(on_device0, kPattern, kWords);
          const CUresult synchronized = cuCtxSynchronize();
          std::fprintf(stderr, "launch=%d synchronize=%d\n", launched, synchronized);
          std::exit(0);
        },
        ::testing::ExitedWithCode(0), expected);
  }
  static constexpr const char* kFaulted = "launch=0 synchronize=700";

  CUcontext device1_context_ = nullptr;
  CUmodule device1_module_ = nullptr;
  CUfunction device1_fill_ = nullptr;
};

using PeerAccessDeathTest = PeerAccessTest;

TEST_F(PeerAccessTest, EveryTwoDistinctDevicesArePeersButNoDeviceIsItsOwn) {
  int can = -1;
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 0, 1));
  EXPECT_EQ(can, 1);
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 1, 0));
  EXPECT_EQ(can, 1);
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 1, 1));
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, -1, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(nullptr, 0, 1), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(PeerAccessTest, LinkAttributesDescribeAnAllToAllNode) {
  const struct {
    CUdevice_P2PAttribute attribute;
    int expected;
  } cases[] = {
      {CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1},
      {CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 1},
      {CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, 1},
      {CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0},
  };
  for (const auto& c : cases) {
    int value = -1;
    ASSERT_CU(cuDeviceGetP2PAttribute(&value, c.attribute, 1, 0));
    EXPECT_EQ(value, c.expected) << "attribute " << c.attribute;
  }
  int value = -1;
  EXPECT_EQ(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 2),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetP2PAttribute(&value, static_cast<CUdevice_P2PAttribute>(99), 0, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetP2PAttribute(nullptr, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(PeerAccessTest, EnableAndDisableReturnTheDriversErrors) {
  enter_device1();
  EXPECT_EQ(cuCtxEnablePeerAccess(context_, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxEnablePeerAccess(device1_context_, 0), CUDA_ERROR_INVALID_CONTEXT);  // itself
  EXPECT_EQ(cuCtxDisablePeerAccess(context_), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  ASSERT_CU(cuCtxEnablePeerAccess(context_, 0));
  EXPECT_EQ(cuCtxEnablePeerAccess(context_, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  ASSERT_CU(cuCtxDisablePeerAccess(context_));
  EXPECT_EQ(cuCtxDisablePeerAccess(context_), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);

  // Another context of the same device: cuDeviceCanAccessPeer says no.
  CUcontext same_device = nullptr;
  ASSERT_CU(cuCtxCreate(&same_device, nullptr, 0, 1));
  ASSERT_CU(cuCtxPopCurrent(nullptr));  // device1_context_ is current again
  EXPECT_EQ(cuCtxEnablePeerAccess(same_device, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  // A destroyed peer is no context at all.
  ASSERT_CU(cuCtxDestroy(same_device));
  EXPECT_EQ(cuCtxEnablePeerAccess(same_device, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDisablePeerAccess(same_device), CUDA_ERROR_INVALID_CONTEXT);
  leave_device1();

  // No current context.
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(cuCtxEnablePeerAccess(context_, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDisablePeerAccess(context_), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context_));
}

TEST_F(PeerAccessDeathTest, KernelOnAnotherDeviceFaultsWithoutPeerAccess) {
  expect_fill_from_device1([](CUdeviceptr) {},
                           "another device's memory without peer access.*launch=0 synchronize=700");
}

TEST_F(PeerAccessTest, KernelOnAnotherDeviceWritesWithPeerAccess) {
  CUdeviceptr on_device0 = 0;
  ASSERT_CU(cuMemAlloc(&on_device0, kWords * 4));
  enter_device1();
  ASSERT_CU(cuCtxEnablePeerAccess(context_, 0));
  ASSERT_CU(fill_on_device1(on_device0, kPattern, kWords));
  ASSERT_CU(cuCtxSynchronize());
  leave_device1();
  EXPECT_EQ(download<uint32_t>(on_device0, kWords), std::vector<uint32_t>(kWords, kPattern));
  ASSERT_CU(cuMemFree(on_device0));
}

TEST_F(PeerAccessDeathTest, AccessIsOneWay) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        enter_device1();
        CUdeviceptr on_device1 = 0;
        if (cuMemAlloc(&on_device1, kWords * 4) != CUDA_SUCCESS) std::exit(2);
        if (cuCtxEnablePeerAccess(context_, 0) != CUDA_SUCCESS) std::exit(3);
        if (cuCtxPopCurrent(nullptr) != CUDA_SUCCESS) std::exit(4);
        const CUresult launched = fill(on_device1, kPattern, kWords);  // device 0's kernel
        const CUresult synchronized = cuCtxSynchronize();
        std::fprintf(stderr, "launch=%d synchronize=%d\n", launched, synchronized);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), kFaulted);
}

TEST_F(PeerAccessDeathTest, DisablingEndsAccess) {
  expect_fill_from_device1([this](CUdeviceptr on_device0) {
    if (cuCtxEnablePeerAccess(context_, 0) != CUDA_SUCCESS) std::exit(3);
    if (fill_on_device1(on_device0, 1, kWords) != CUDA_SUCCESS ||
        cuCtxSynchronize() != CUDA_SUCCESS)
      std::exit(4);  // accessible while enabled
    if (cuCtxDisablePeerAccess(context_) != CUDA_SUCCESS) std::exit(5);
  });
}

// A new context of device 1 (which may reuse the destroyed one's address) starts without access.
TEST_F(PeerAccessDeathTest, DestroyingTheContextEndsItsAccess) {
  expect_fill_from_device1([this](CUdeviceptr) {
    if (cuCtxEnablePeerAccess(context_, 0) != CUDA_SUCCESS) std::exit(3);
    leave_device1();
    enter_device1();
  });
}

TEST_F(PeerAccessDeathTest, DestroyingThePeerEndsAccess) {
  expect_fill_from_device1([](CUdeviceptr) {
    CUcontext peer = nullptr;  // a second context of device 0, the one access is granted to
    if (cuCtxCreate(&peer, nullptr, 0, 0) != CUDA_SUCCESS) std::exit(3);
    if (cuCtxPopCurrent(nullptr) != CUDA_SUCCESS) std::exit(4);  // device 1's is current again
    if (cuCtxEnablePeerAccess(peer, 0) != CUDA_SUCCESS) std::exit(5);
    if (cuCtxDestroy(peer) != CUDA_SUCCESS) std::exit(6);
  });
}

TEST_F(PeerAccessTest, ManagedAndPinnedHostMemoryNeedNoPeerAccess) {
  CUdeviceptr managed = 0;
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocManaged(&managed, kWords * 4, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cuMemHostAlloc(&pinned, kWords * 4, CU_MEMHOSTALLOC_DEVICEMAP));
  std::memset(pinned, 0, kWords * 4);
  enter_device1();
  ASSERT_CU(fill_on_device1(managed, kPattern, kWords));
  ASSERT_CU(fill_on_device1(reinterpret_cast<CUdeviceptr>(pinned), kPattern + 1, kWords));
  ASSERT_CU(cuCtxSynchronize());
  leave_device1();
  const auto* managed_words = reinterpret_cast<const uint32_t*>(managed);
  const auto* pinned_words = static_cast<const uint32_t*>(pinned);
  EXPECT_EQ(std::vector<uint32_t>(managed_words, managed_words + kWords),
            std::vector<uint32_t>(kWords, kPattern));
  EXPECT_EQ(std::vector<uint32_t>(pinned_words, pinned_words + kWords),
            std::vector<uint32_t>(kWords, kPattern + 1));
  ASSERT_CU(cuMemFree(managed));
  ASSERT_CU(cuMemFreeHost(pinned));
}

}  // namespace
