// Multicast objects (Note [Multicast objects] in api/multicast.cpp), for cuMemRelease, which
// releases them as it releases allocation handles.
#pragma once

#include <cuda.h>

namespace simcuda {

// Releases the multicast object `handle`; CUDA_ERROR_INVALID_VALUE when it names none.
CUresult multicast_release(CUmemGenericAllocationHandle handle);

}  // namespace simcuda
