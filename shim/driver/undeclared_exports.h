// Driver exports that cuda.h declares no prototype for, even with __CUDA_API_VERSION_INTERNAL,
// though the driver has them and cudart hands them out: the per-thread forms of functions whose
// current ABI is a _v2 (cudart 13.0 resolves cuMemcpyBatchAsync at 13000 with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM to cuMemcpyBatchAsync_v2_ptsz, and likewise the
// stream memory operations: tests/data/cudart-13.0.88-driver-lookups.txt). Each is declared with
// the type cudaTypedefs.h gives its ABI, so that the driver table (Note [The driver table]) can
// hook it with exactly the driver's signature.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#define VRAMSPILL_DECLARE_EXPORT(name, pfn) extern "C" std::remove_pointer_t<pfn> name;

VRAMSPILL_DECLARE_EXPORT(cuMemcpyBatchAsync_v2_ptsz, PFN_cuMemcpyBatchAsync_v13000_ptsz)
VRAMSPILL_DECLARE_EXPORT(cuMemcpy3DBatchAsync_v2_ptsz, PFN_cuMemcpy3DBatchAsync_v13000_ptsz)
VRAMSPILL_DECLARE_EXPORT(cuStreamWriteValue32_v2_ptsz, PFN_cuStreamWriteValue32_v11070_ptsz)
VRAMSPILL_DECLARE_EXPORT(cuStreamWaitValue32_v2_ptsz, PFN_cuStreamWaitValue32_v11070_ptsz)
VRAMSPILL_DECLARE_EXPORT(cuStreamWriteValue64_v2_ptsz, PFN_cuStreamWriteValue64_v11070_ptsz)
VRAMSPILL_DECLARE_EXPORT(cuStreamWaitValue64_v2_ptsz, PFN_cuStreamWaitValue64_v11070_ptsz)
VRAMSPILL_DECLARE_EXPORT(cuStreamBatchMemOp_v2_ptsz, PFN_cuStreamBatchMemOp_v11070_ptsz)
VRAMSPILL_DECLARE_EXPORT(cuMemBatchDecompressAsync_ptsz, PFN_cuMemBatchDecompressAsync_v12060_ptsz)

#undef VRAMSPILL_DECLARE_EXPORT
