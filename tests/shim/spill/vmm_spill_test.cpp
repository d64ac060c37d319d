// cuMemCreate past the budget (PyTorch's expandable segments; Note [Host-located VMM spills] in
// shim/placement/vmm_spill.h): in every mode but `off` the program gets a host-located handle,
// maps it, grants its device access and uses it byte-exact from kernels, memsets and copies; the
// handle holds host budget until its last release or unmap, and the device budget never. With
// SPILL_EXPECT=off (mode `off`, or a device without host-located VMM memory) the same request
// is CUDA_ERROR_OUT_OF_MEMORY. VMM_EXPECT_LOCATION says where the handle must be: host_numa (the
// default) or host. CMakeLists.txt sets the environment and checks the log.
#include "spill_support.h"

namespace {

using spill::kBlock;
using spill::kMiB;
using spill::pattern;

constexpr size_t kWords = kBlock / sizeof(uint32_t);

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  return prop;
}

CUmemLocationType expected_location() {
  const char* value = std::getenv("VMM_EXPECT_LOCATION");
  return value != nullptr && std::string_view(value) == "host" ? CU_MEM_LOCATION_TYPE_HOST
                                                               : CU_MEM_LOCATION_TYPE_HOST_NUMA;
}

CUmemLocationType location_of(CUmemGenericAllocationHandle handle) {
  CUmemAllocationProp prop{};
  EXPECT_CU(cuMemGetAllocationPropertiesFromHandle(&prop, handle));
  return prop.location.type;
}

class VmmSpill : public spill::SpillTest {
 protected:
  void TearDown() override {
    for (const Mapping& mapping : mappings_) {
      EXPECT_CU(cuMemUnmap(mapping.address, kBlock));
      EXPECT_CU(cuMemAddressFree(mapping.address, kBlock));
    }
    for (const CUmemGenericAllocationHandle handle : handles_) EXPECT_CU(cuMemRelease(handle));
    EXPECT_EQ(free_bytes(), expected_free(0));
    SpillTest::TearDown();
  }

  CUresult create(CUmemGenericAllocationHandle& handle) {
    const CUmemAllocationProp prop = device_prop(device_);
    handle = 0;
    const CUresult result = cuMemCreate(&handle, kBlock, &prop, 0);
    if (result == CUDA_SUCCESS) handles_.push_back(handle);
    return result;
  }

  // Maps `handle` at a fresh address with read-write access for the device, as frameworks do.
  CUdeviceptr map(CUmemGenericAllocationHandle handle) {
    CUdeviceptr address = 0;
    EXPECT_CU(cuMemAddressReserve(&address, kBlock, 0, 0, 0));
    EXPECT_CU(cuMemMap(address, kBlock, 0, handle, 0));
    CUmemAccessDesc access{};
    access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_CU(cuMemSetAccess(address, kBlock, &access, 1));
    mappings_.push_back(Mapping{.address = address, .handle = handle});
    return address;
  }

  void unmap(CUdeviceptr address) {
    ASSERT_CU(cuMemUnmap(address, kBlock));
    ASSERT_CU(cuMemAddressFree(address, kBlock));
    std::erase_if(mappings_, [address](const Mapping& m) { return m.address == address; });
  }

  void release(CUmemGenericAllocationHandle handle) {
    ASSERT_CU(cuMemRelease(handle));
    std::erase(handles_, handle);
  }

  // Device-located handles until the next one would not fit on the device.
  void fill_device_with_handles() {
    for (size_t i = 0, count = device_capacity(kBlock); i < count; ++i) {
      CUmemGenericAllocationHandle handle = 0;
      ASSERT_CU(create(handle));
      ASSERT_EQ(location_of(handle), CU_MEM_LOCATION_TYPE_DEVICE) << "handle " << i;
    }
    device_handles_ = handles_.size();
    ASSERT_EQ(free_bytes(), expected_free(device_handles_ * kBlock));
  }

  struct Mapping {
    CUdeviceptr address = 0;
    CUmemGenericAllocationHandle handle = 0;
  };
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<Mapping> mappings_;
  size_t device_handles_ = 0;
};

TEST_F(VmmSpill, PastTheBudgetTheHandleIsHostLocatedAndWorksByteExact) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_handles());
  CUmemGenericAllocationHandle spilled = 0;
  if (spill::spilling_off()) {
    EXPECT_EQ(create(spilled), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(spilled, 0u);
    return;
  }
  ASSERT_CU(create(spilled));
  // The driver's own answer: the handle is host memory, and the device budget did not move.
  EXPECT_EQ(location_of(spilled), expected_location());
  EXPECT_EQ(free_bytes(), expected_free(device_handles_ * kBlock));

  const CUdeviceptr host_located = map(spilled);
  const CUdeviceptr on_device = map(handles_.front());
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(host_located)));
  EXPECT_EQ(location_of(retained), expected_location());
  ASSERT_CU(cuMemRelease(retained));

  std::vector<uint32_t> scratch;
  // A device memset, read back by a copy.
  ASSERT_CU(cuMemsetD32(host_located, 0xa5a5f00du, kWords));
  EXPECT_EQ(first_mismatch(
                host_located, kWords, [](size_t) { return 0xa5a5f00du; }, scratch),
            kWords);
  // A pattern copied in, copied on the device by a kernel both ways, and read back.
  std::vector<uint32_t> words(kWords);
  for (size_t j = 0; j < kWords; ++j) words[j] = pattern(7, j);
  ASSERT_CU(cuMemcpyHtoD(host_located, words.data(), kBlock));
  ASSERT_CU(copy(on_device, host_located, kBlock, stream_));
  ASSERT_CU(fill(host_located, 0u, kWords, stream_));
  ASSERT_CU(copy(host_located, on_device, kBlock, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(first_mismatch(
                host_located, kWords, [](size_t j) { return pattern(7, j); }, scratch),
            kWords);
  EXPECT_EQ(first_mismatch(
                on_device, kWords, [](size_t j) { return pattern(7, j); }, scratch),
            kWords);
}

// The host limit is 8 MiB (CMakeLists.txt): two spilled handles fit. A released handle still mapped
// holds its host bytes (Note [VMM memory lives until its last mapping goes]); its unmap gives them
// back.
TEST_F(VmmSpill, SpilledHandlesHoldTheHostLimitUntilTheDriverFreesThem) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_handles());
  CUmemGenericAllocationHandle first = 0;
  CUmemGenericAllocationHandle second = 0;
  CUmemGenericAllocationHandle third = 0;
  ASSERT_CU(create(first));
  const CUdeviceptr mapped = map(first);
  ASSERT_NO_FATAL_FAILURE(release(first));  // still mapped: still held
  ASSERT_CU(create(second));
  EXPECT_EQ(create(third), CUDA_ERROR_OUT_OF_MEMORY) << "past the host limit";
  ASSERT_NO_FATAL_FAILURE(release(second));  // not mapped: freed at once
  ASSERT_CU(create(second));
  EXPECT_EQ(create(third), CUDA_ERROR_OUT_OF_MEMORY) << "the mapped one still holds its bytes";
  ASSERT_NO_FATAL_FAILURE(unmap(mapped));  // its last mapping: freed now
  ASSERT_CU(create(third));
  EXPECT_EQ(location_of(third), expected_location());
  EXPECT_EQ(free_bytes(), expected_free(device_handles_ * kBlock));
}

// Note [The program's host-located handles] in shim/placement/vmm_books.h: a host-located
// handle the program makes itself takes no device memory but is pinned memory, counted against
// the host limit while it lives: here it leaves room for one spill, not two.
TEST_F(VmmSpill, TheProgramsOwnHostHandlesLeaveLessOfTheHostLimitForSpills) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_handles());
  CUmemAllocationProp host_prop = device_prop(device_);
  host_prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  CUmemGenericAllocationHandle own = 0;
  ASSERT_CU(cuMemCreate(&own, kBlock, &host_prop, 0));
  CUmemGenericAllocationHandle spilled = 0;
  CUmemGenericAllocationHandle refused = 0;
  ASSERT_CU(create(spilled));
  EXPECT_EQ(location_of(spilled), expected_location());
  EXPECT_EQ(create(refused), CUDA_ERROR_OUT_OF_MEMORY) << "the program's handle holds the rest";
  ASSERT_CU(cuMemRelease(own));
  ASSERT_CU(create(refused));
  EXPECT_EQ(location_of(refused), expected_location());
}

// Note [Multicast binds device memory] in shim/placement/vmm_spill.h: a handle spilled before a
// multicast object waited for memory cannot be bound to it (the driver refuses, the log says
// why); while one waits no handle spills, also between the pieces of memory bound to it one by
// one, and once its whole size is bound they spill again.
class VmmSpillMulticast : public VmmSpill {};

TEST_F(VmmSpillMulticast, NoHandleSpillsWhileAMulticastObjectWaitsForItsMemory) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_handles());
  CUmemGenericAllocationHandle spilled = 0;
  ASSERT_CU(create(spilled));
  ASSERT_EQ(location_of(spilled), expected_location());
  const CUdeviceptr spilled_at = map(spilled);

  CUmulticastObjectProp prop{};
  prop.numDevices = 1;
  prop.size = 2 * kBlock;  // bound in two pieces
  CUmemGenericAllocationHandle object = 0;
  ASSERT_CU(cuMulticastCreate(&object, &prop));
  ASSERT_CU(cuMulticastAddDevice(object, device_));
  EXPECT_EQ(cuMulticastBindMem(object, 0, spilled, 0, kBlock, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastBindAddr(object, 0, spilled_at, kBlock, 0), CUDA_ERROR_INVALID_DEVICE);
  CUmemGenericAllocationHandle refused = 0;
  EXPECT_EQ(create(refused), CUDA_ERROR_OUT_OF_MEMORY) << "spilled while a bind is pending";

  ASSERT_NO_FATAL_FAILURE(release(handles_[0]));  // room on the device: it binds there
  CUmemGenericAllocationHandle first = 0;
  ASSERT_CU(create(first));
  ASSERT_EQ(location_of(first), CU_MEM_LOCATION_TYPE_DEVICE);
  ASSERT_CU(cuMulticastBindMem(object, 0, first, 0, kBlock, 0));
  EXPECT_EQ(create(refused), CUDA_ERROR_OUT_OF_MEMORY) << "half the object is still unbound";
  ASSERT_NO_FATAL_FAILURE(release(handles_[0]));
  CUmemGenericAllocationHandle second = 0;
  ASSERT_CU(create(second));
  ASSERT_EQ(location_of(second), CU_MEM_LOCATION_TYPE_DEVICE);
  ASSERT_CU(cuMulticastBindAddr(object, kBlock, map(second), kBlock, 0));

  CUmemGenericAllocationHandle spilled_again = 0;
  ASSERT_CU(create(spilled_again)) << "the object is bound whole: handles spill again";
  EXPECT_EQ(location_of(spilled_again), expected_location());
  ASSERT_CU(cuMulticastUnbind(object, device_, 0, kBlock));
  ASSERT_CU(cuMulticastUnbind(object, device_, kBlock, kBlock));
  ASSERT_CU(cuMemRelease(object));
}

}  // namespace
