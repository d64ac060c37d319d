// Multicast objects on simcuda (Note [Multicast objects] in tools/simcuda/src/api/multicast.cpp):
// a bind takes a cuMemCreate allocation of a device of the team, never host-located memory, and
// only devices that support multicast make or join one. The ctest entries set SIMCUDA_DEVICES=2
// and, for all but the last test, SIMCUDA_ATTRS=MULTICAST_SUPPORTED=1.
#include "driver_test_support.h"

namespace {

constexpr size_t kGranule = 2 * kMiB;

CUmemAllocationProp located(CUmemLocationType type, int id) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {type, id};
  return prop;
}

CUmulticastObjectProp team_of_two(size_t size) {
  CUmulticastObjectProp prop{};
  prop.numDevices = 2;
  prop.size = size;
  return prop;
}

class MulticastTest : public DriverTest {
 protected:
  CUmemGenericAllocationHandle create(CUmemLocationType type, int id) {
    const CUmemAllocationProp prop = located(type, id);
    CUmemGenericAllocationHandle handle = 0;
    EXPECT_CU(cuMemCreate(&handle, 2 * kGranule, &prop, 0));
    return handle;
  }
};

TEST_F(MulticastTest, ABindTakesDeviceMemoryOfTheTeamOnly) {
  const CUmulticastObjectProp prop = team_of_two(2 * kGranule);
  size_t granularity = 0;
  ASSERT_CU(cuMulticastGetGranularity(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM));
  EXPECT_EQ(granularity, kGranule);
  CUmemGenericAllocationHandle object = 0;
  ASSERT_CU(cuMulticastCreate(&object, &prop));
  ASSERT_CU(cuMulticastAddDevice(object, 0));

  const CUmemGenericAllocationHandle on_device = create(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  const CUmemGenericAllocationHandle on_host = create(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  const CUmemGenericAllocationHandle on_peer = create(CU_MEM_LOCATION_TYPE_DEVICE, 1);
  EXPECT_EQ(cuMulticastBindMem(object, 0, on_host, 0, 2 * kGranule, 0),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastBindMem(object, 0, on_peer, 0, 2 * kGranule, 0),
            CUDA_ERROR_INVALID_DEVICE)
      << "device 1 is not in the team yet";
  EXPECT_EQ(cuMulticastBindMem(object, 0, on_device, kGranule, 2 * kGranule, 0),
            CUDA_ERROR_INVALID_VALUE)
      << "past the allocation's end";
  EXPECT_EQ(cuMulticastBindMem(object, 0, on_device, 0, kMiB, 0), CUDA_ERROR_INVALID_VALUE)
      << "not a multiple of the granularity";
  ASSERT_CU(cuMulticastBindMem(object, 0, on_device, 0, 2 * kGranule, 0));
  ASSERT_CU(cuMulticastUnbind(object, 0, 0, 2 * kGranule));
  ASSERT_CU(cuMulticastAddDevice(object, 1));
  ASSERT_CU(cuMulticastBindMem(object, 0, on_peer, 0, 2 * kGranule, 0));

  EXPECT_CU(cuMemRelease(object));
  EXPECT_EQ(cuMemRelease(object), CUDA_ERROR_INVALID_VALUE);
  for (const CUmemGenericAllocationHandle handle : {on_device, on_host, on_peer})
    EXPECT_CU(cuMemRelease(handle));
}

TEST_F(MulticastTest, WithoutMulticastSupportNoObjectIsMade) {
  const CUmulticastObjectProp prop = team_of_two(kGranule);
  CUmemGenericAllocationHandle object = 0;
  EXPECT_EQ(cuMulticastCreate(&object, &prop), CUDA_ERROR_NOT_SUPPORTED);
  size_t granularity = 0;
  EXPECT_EQ(cuMulticastGetGranularity(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM),
            CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace
