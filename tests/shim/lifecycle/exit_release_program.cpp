// Holds an allocation to the end and, from a static destructor once exit() has begun, as a
// runtime's teardown may, synchronises the per-thread default stream and releases its primary
// context: the shim has written its last words by then, and the release goes to the driver
// unchanged, without resetting the shim's books (Note [The last release of a primary context] in
// shim/hooks/device_reset.h). The main thread's thread-locals are gone by then, so the driver must
// keep nothing it needs for these calls in them.
#include "program_support.h"

namespace {

// Constructed before main(), so destroyed after the handler the shim registers at exit when the
// program first reaches the driver.
struct ReleasedAtExit {
  CUdevice device = 0;
  ~ReleasedAtExit() {
    std::printf("synchronized=%d\n", cuStreamSynchronize(CU_STREAM_PER_THREAD));
    std::printf("released=%d\n", cuDevicePrimaryCtxRelease(device));
  }
} released_at_exit;

}  // namespace

int main() {
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&released_at_exit.device, 0));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, released_at_exit.device));
  CHECK_CU(cuCtxSetCurrent(context));
  CUdeviceptr held = 0;
  CHECK_CU(cuMemAlloc(&held, 16 * vramspill::testing::kMiB));
  // The per-thread default stream is first used here, so that what the driver keeps for it in
  // this thread exists before exit() begins (and would be destroyed with the thread-locals).
  CHECK_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  return 0;
}
