// Giving memory back by pointer: the one place that knows which module owns each kind.
#pragma once

#include <cuda.h>

namespace simcuda {

// cuMemFree semantics: the device is synchronised first (cudaFree synchronises, and so does the
// driver's cuMemFree), then the allocation starting at `address` is returned to where it came
// from. CUDA_ERROR_INVALID_VALUE for a pointer that is not the start of a live allocation.
CUresult release_device_pointer(CUdeviceptr address);

}  // namespace simcuda
