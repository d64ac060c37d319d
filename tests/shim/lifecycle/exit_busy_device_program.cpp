// Exits while the shim's thread for stream-ordered frees is inside a free that waits for the whole
// device, and the device never comes free: one stream waits for a value nobody writes (as a
// collective whose peer died waits), and a managed spill freed with cuMemFreeAsync on another
// stream is handed to that thread. The exit must not wait for the device (Note [Stream-ordered
// frees on the shim's thread] in shim/tiers/stream_ordered_frees.h).
#include <unistd.h>

#include <cstdint>

#include "program_support.h"

int main() {
  using vramspill::testing::kMiB;
  vramspill::testing::init_primary_context();
  CUstream stuck = nullptr;
  CUstream freeing = nullptr;
  CHECK_CU(cuStreamCreate(&stuck, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&freeing, CU_STREAM_NON_BLOCKING));
  CUdeviceptr flag = 0;
  CHECK_CU(cuMemAlloc(&flag, sizeof(uint32_t)));
  CHECK_CU(cuMemsetD32(flag, 0, 1));
  CHECK_CU(cuStreamWaitValue32(stuck, flag, 1, CU_STREAM_WAIT_VALUE_GEQ));  // never met
  CUdeviceptr spilled = 0;
  CHECK_CU(cuMemAllocAsync(&spilled, 16 * kMiB, freeing));  // past the budget: managed memory
  CHECK_CU(cuMemFreeAsync(spilled, freeing));
  CHECK_CU(cuStreamSynchronize(freeing));  // the free is handed over, and waits for the device
  usleep(100 * 1000);                      // ... once the shim's thread has taken it
  std::printf("exiting\n");
  return 0;
}
