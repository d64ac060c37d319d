// Every submission the driver table lists (VRAMSPILL_HOOKED_SUBMISSION_FUNCTIONS): launches,
// copies, memsets, graph launches, host functions, stream memory operations and decompression. Each tells the use tracker which tracked
// blocks it may touch, then forwards (shim/README.md, "Use tracking"). With nothing tracked, which
// is every mode but tiered, a hook costs what a pass-through did plus one load: the state pointer
// and the tracker's snapshot (hooks/use_tracking.h). ctest -R submissions_are_tracked checks that
// every export of the list is defined here, through VRAMSPILL_SUBMISSION.
#include <cuda.h>

#include <string_view>

#include "hooks/hook.h"
#include "hooks/tiered_allocation.h"
#include "hooks/use_tracking.h"

namespace {

// A _ptds/_ptsz export: its null stream is the thread's default stream.
constexpr bool is_per_thread(std::string_view name) {
  return name.ends_with("_ptds") || name.ends_with("_ptsz");
}

}  // namespace

using vramspill::core::SubmissionUse;
using vramspill::hooks::pitched;
using vramspill::hooks::ShimState;
using vramspill::hooks::tracking_state;

// `record` runs only when something is tracked (tiered mode holds blocks), with `shim`, `use` and
// `stream_of(s)` (the tracker's id for stream s) in scope. It stamps the blocks the submission
// touches and lists them in `use`; tiered mode makes them resident as its policy decides, and
// the call reaches the driver inside the remap window (Note [One way through for a submission]
// in placement/submission_order.h).
#define VRAMSPILL_SUBMISSION(name, parameters, arguments, record)                            \
  VRAMSPILL_HOOK CUresult CUDAAPI name parameters {                                          \
    VRAMSPILL_REAL_OR_RETURN(real, name);                                                    \
    if (ShimState* shim = tracking_state()) [[unlikely]] {                                   \
      const auto stream_of = [](CUstream s) {                                                \
        return vramspill::hooks::stream_id(s, is_per_thread(#name));                         \
      };                                                                                     \
      SubmissionUse use;                                                                     \
      record;                                                                                \
      auto passage = shim->submissions.submit(use);                                          \
      const CUresult result = real arguments;                                                \
      passage.done();                                                                        \
      return result;                                                                         \
    }                                                                                        \
    return real arguments;                                                                   \
  }

#define VRAMSPILL_RANGES(stream, ...) \
  vramspill::hooks::record_ranges(*shim, stream_of(stream), {__VA_ARGS__}, use)

// --- Launches -----------------------------------------------------------------------------------

#define VRAMSPILL_LAUNCH_KERNEL(name)                                                            \
  VRAMSPILL_SUBMISSION(                                                                          \
      name,                                                                                      \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,        \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                   \
       unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra),        \
      (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,         \
       hStream, kernelParams, extra),                                                            \
      vramspill::hooks::record_kernel(*shim, f, stream_of(hStream), kernelParams, extra, use))
VRAMSPILL_LAUNCH_KERNEL(cuLaunchKernel)
VRAMSPILL_LAUNCH_KERNEL(cuLaunchKernel_ptsz)

#define VRAMSPILL_LAUNCH_KERNEL_EX(name)                                                      \
  VRAMSPILL_SUBMISSION(name,                                                                  \
                       (const CUlaunchConfig* config, CUfunction f, void** kernelParams,      \
                        void** extra),                                                        \
                       (config, f, kernelParams, extra),                                      \
                       vramspill::hooks::record_kernel(                                       \
                           *shim, f, stream_of(config != nullptr ? config->hStream : nullptr), \
                           kernelParams, extra, use))
VRAMSPILL_LAUNCH_KERNEL_EX(cuLaunchKernelEx)
VRAMSPILL_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz)

#define VRAMSPILL_LAUNCH_COOPERATIVE(name)                                                       \
  VRAMSPILL_SUBMISSION(                                                                          \
      name,                                                                                      \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,        \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                   \
       unsigned int sharedMemBytes, CUstream hStream, void** kernelParams),                      \
      (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,         \
       hStream, kernelParams),                                                                   \
      vramspill::hooks::record_kernel(*shim, f, stream_of(hStream), kernelParams, nullptr, use))
VRAMSPILL_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
VRAMSPILL_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

// What the exec's nodes touch, read when it was instantiated (hooks/graph_hooks.cpp); an exec
// that could not be read may touch every block, and tiered mode synchronises before remapping
// anything under it.
#define VRAMSPILL_GRAPH_LAUNCH(name)                                                   \
  VRAMSPILL_SUBMISSION(name, (CUgraphExec hGraphExec, CUstream hStream),               \
                       (hGraphExec, hStream),                                          \
                       vramspill::hooks::record_graph(*shim, hGraphExec, stream_of(hStream), use))
VRAMSPILL_GRAPH_LAUNCH(cuGraphLaunch)
VRAMSPILL_GRAPH_LAUNCH(cuGraphLaunch_ptsz)

// A host function runs on the host: a submission that touches no block (its stream's earlier
// work is what it waits for, and that was recorded when it was submitted).
#define VRAMSPILL_LAUNCH_HOST_FUNC(name)                                              \
  VRAMSPILL_SUBMISSION(name, (CUstream hStream, CUhostFn fn, void* userData),         \
                       (hStream, fn, userData), VRAMSPILL_RANGES(hStream))
VRAMSPILL_LAUNCH_HOST_FUNC(cuLaunchHostFunc)
VRAMSPILL_LAUNCH_HOST_FUNC(cuLaunchHostFunc_ptsz)

// --- Linear copies ------------------------------------------------------------------------------

// Synchronous forms name the default stream (nullptr); asynchronous ones take `stream` last.
#define VRAMSPILL_COPY(name)                                                            \
  VRAMSPILL_SUBMISSION(name, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes), \
                       VRAMSPILL_RANGES(nullptr, {dst, bytes}, {src, bytes}))
VRAMSPILL_COPY(cuMemcpy)
VRAMSPILL_COPY(cuMemcpy_ptds)
VRAMSPILL_COPY(cuMemcpyDtoD_v2)
VRAMSPILL_COPY(cuMemcpyDtoD_v2_ptds)

#define VRAMSPILL_COPY_ASYNC(name)                                                               \
  VRAMSPILL_SUBMISSION(name, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),  \
                       (dst, src, bytes, stream),                                                \
                       VRAMSPILL_RANGES(stream, {dst, bytes}, {src, bytes}))
VRAMSPILL_COPY_ASYNC(cuMemcpyAsync)
VRAMSPILL_COPY_ASYNC(cuMemcpyAsync_ptsz)
VRAMSPILL_COPY_ASYNC(cuMemcpyDtoDAsync_v2)
VRAMSPILL_COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz)

#define VRAMSPILL_COPY_PEER(name)                                                             \
  VRAMSPILL_SUBMISSION(name,                                                                  \
                       (CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src,               \
                        CUcontext srcContext, size_t bytes),                                  \
                       (dst, dstContext, src, srcContext, bytes),                             \
                       VRAMSPILL_RANGES(nullptr, {dst, bytes}, {src, bytes}))
VRAMSPILL_COPY_PEER(cuMemcpyPeer)
VRAMSPILL_COPY_PEER(cuMemcpyPeer_ptds)

#define VRAMSPILL_COPY_PEER_ASYNC(name)                                                       \
  VRAMSPILL_SUBMISSION(name,                                                                  \
                       (CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src,               \
                        CUcontext srcContext, size_t bytes, CUstream stream),                 \
                       (dst, dstContext, src, srcContext, bytes, stream),                     \
                       VRAMSPILL_RANGES(stream, {dst, bytes}, {src, bytes}))
VRAMSPILL_COPY_PEER_ASYNC(cuMemcpyPeerAsync)
VRAMSPILL_COPY_PEER_ASYNC(cuMemcpyPeerAsync_ptsz)

#define VRAMSPILL_COPY_TO_DEVICE(name)                                                   \
  VRAMSPILL_SUBMISSION(name, (CUdeviceptr dst, const void* src, size_t bytes),           \
                       (dst, src, bytes), VRAMSPILL_RANGES(nullptr, {dst, bytes}))
VRAMSPILL_COPY_TO_DEVICE(cuMemcpyHtoD_v2)
VRAMSPILL_COPY_TO_DEVICE(cuMemcpyHtoD_v2_ptds)

#define VRAMSPILL_COPY_TO_DEVICE_ASYNC(name)                                                     \
  VRAMSPILL_SUBMISSION(name, (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream),  \
                       (dst, src, bytes, stream), VRAMSPILL_RANGES(stream, {dst, bytes}))
VRAMSPILL_COPY_TO_DEVICE_ASYNC(cuMemcpyHtoDAsync_v2)
VRAMSPILL_COPY_TO_DEVICE_ASYNC(cuMemcpyHtoDAsync_v2_ptsz)

#define VRAMSPILL_COPY_TO_HOST(name)                                           \
  VRAMSPILL_SUBMISSION(name, (void* dst, CUdeviceptr src, size_t bytes),       \
                       (dst, src, bytes), VRAMSPILL_RANGES(nullptr, {src, bytes}))
VRAMSPILL_COPY_TO_HOST(cuMemcpyDtoH_v2)
VRAMSPILL_COPY_TO_HOST(cuMemcpyDtoH_v2_ptds)

#define VRAMSPILL_COPY_TO_HOST_ASYNC(name)                                                \
  VRAMSPILL_SUBMISSION(name, (void* dst, CUdeviceptr src, size_t bytes, CUstream stream), \
                       (dst, src, bytes, stream), VRAMSPILL_RANGES(stream, {src, bytes}))
VRAMSPILL_COPY_TO_HOST_ASYNC(cuMemcpyDtoHAsync_v2)
VRAMSPILL_COPY_TO_HOST_ASYNC(cuMemcpyDtoHAsync_v2_ptsz)

#define VRAMSPILL_COPY_TO_ARRAY(name)                                                       \
  VRAMSPILL_SUBMISSION(name, (CUarray dst, size_t dstOffset, CUdeviceptr src, size_t bytes), \
                       (dst, dstOffset, src, bytes), VRAMSPILL_RANGES(nullptr, {src, bytes}))
VRAMSPILL_COPY_TO_ARRAY(cuMemcpyDtoA_v2)
VRAMSPILL_COPY_TO_ARRAY(cuMemcpyDtoA_v2_ptds)

#define VRAMSPILL_COPY_FROM_ARRAY(name)                                                     \
  VRAMSPILL_SUBMISSION(name, (CUdeviceptr dst, CUarray src, size_t srcOffset, size_t bytes), \
                       (dst, src, srcOffset, bytes), VRAMSPILL_RANGES(nullptr, {dst, bytes}))
VRAMSPILL_COPY_FROM_ARRAY(cuMemcpyAtoD_v2)
VRAMSPILL_COPY_FROM_ARRAY(cuMemcpyAtoD_v2_ptds)

// --- 2D and 3D copies: the bytes each linear side spans ------------------------------------------

#define VRAMSPILL_COPY_DESCRIBED(name, type)                                        \
  VRAMSPILL_SUBMISSION(name, (const type* pCopy), (pCopy),                          \
                       vramspill::hooks::record_copy(*shim, stream_of(nullptr), pCopy, use))
VRAMSPILL_COPY_DESCRIBED(cuMemcpy2D_v2, CUDA_MEMCPY2D)
VRAMSPILL_COPY_DESCRIBED(cuMemcpy2D_v2_ptds, CUDA_MEMCPY2D)
VRAMSPILL_COPY_DESCRIBED(cuMemcpy2DUnaligned_v2, CUDA_MEMCPY2D)
VRAMSPILL_COPY_DESCRIBED(cuMemcpy2DUnaligned_v2_ptds, CUDA_MEMCPY2D)
VRAMSPILL_COPY_DESCRIBED(cuMemcpy3D_v2, CUDA_MEMCPY3D)
VRAMSPILL_COPY_DESCRIBED(cuMemcpy3D_v2_ptds, CUDA_MEMCPY3D)
VRAMSPILL_COPY_DESCRIBED(cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER)
VRAMSPILL_COPY_DESCRIBED(cuMemcpy3DPeer_ptds, CUDA_MEMCPY3D_PEER)

#define VRAMSPILL_COPY_DESCRIBED_ASYNC(name, type)                                   \
  VRAMSPILL_SUBMISSION(name, (const type* pCopy, CUstream stream), (pCopy, stream),  \
                       vramspill::hooks::record_copy(*shim, stream_of(stream), pCopy, use))
VRAMSPILL_COPY_DESCRIBED_ASYNC(cuMemcpy2DAsync_v2, CUDA_MEMCPY2D)
VRAMSPILL_COPY_DESCRIBED_ASYNC(cuMemcpy2DAsync_v2_ptsz, CUDA_MEMCPY2D)
VRAMSPILL_COPY_DESCRIBED_ASYNC(cuMemcpy3DAsync_v2, CUDA_MEMCPY3D)
VRAMSPILL_COPY_DESCRIBED_ASYNC(cuMemcpy3DAsync_v2_ptsz, CUDA_MEMCPY3D)
VRAMSPILL_COPY_DESCRIBED_ASYNC(cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER)
VRAMSPILL_COPY_DESCRIBED_ASYNC(cuMemcpy3DPeerAsync_ptsz, CUDA_MEMCPY3D_PEER)

// --- Batches ------------------------------------------------------------------------------------

// CUDA 12.8's form reports a failing index; 13.0's (_v2) does not.
#define VRAMSPILL_COPY_BATCH(name, ...)                                                        \
  VRAMSPILL_SUBMISSION(name,                                                                   \
                       (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,  \
                        CUmemcpyAttributes * attrs, size_t * attrsIdxs,                        \
                        size_t numAttrs __VA_OPT__(, ) __VA_ARGS__, CUstream hStream),         \
                       (dsts, srcs, sizes, count, attrs, attrsIdxs,                            \
                        numAttrs __VA_OPT__(, failIdx), hStream),                              \
                       vramspill::hooks::record_batch(*shim, stream_of(hStream), dsts, srcs,   \
                                                      sizes, count, use))
VRAMSPILL_COPY_BATCH(cuMemcpyBatchAsync, size_t* failIdx)
VRAMSPILL_COPY_BATCH(cuMemcpyBatchAsync_ptsz, size_t* failIdx)
VRAMSPILL_COPY_BATCH(cuMemcpyBatchAsync_v2)
VRAMSPILL_COPY_BATCH(cuMemcpyBatchAsync_v2_ptsz)

// Each operand may be a pointer or an array, with its own layout: taken as touching everything
// until tiered mode needs better.
#define VRAMSPILL_COPY_3D_BATCH(name, ...)                                                   \
  VRAMSPILL_SUBMISSION(name,                                                                 \
                       (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * opList,                      \
                        __VA_OPT__(__VA_ARGS__, ) unsigned long long flags, CUstream hStream), \
                       (numOps, opList, __VA_OPT__(failIdx, ) flags, hStream),               \
                       shim->use.record_everything(stream_of(hStream), use))
VRAMSPILL_COPY_3D_BATCH(cuMemcpy3DBatchAsync, size_t* failIdx)
VRAMSPILL_COPY_3D_BATCH(cuMemcpy3DBatchAsync_ptsz, size_t* failIdx)
VRAMSPILL_COPY_3D_BATCH(cuMemcpy3DBatchAsync_v2)
VRAMSPILL_COPY_3D_BATCH(cuMemcpy3DBatchAsync_v2_ptsz)

// --- Memsets: `count` elements of `element` bytes, in rows `pitch` apart for the 2D forms ---------

#define VRAMSPILL_MEMSET(name, value_type, element)                                           \
  VRAMSPILL_SUBMISSION(name, (CUdeviceptr dst, value_type value, size_t count),               \
                       (dst, value, count), VRAMSPILL_RANGES(nullptr, {dst, count * element}))
#define VRAMSPILL_MEMSET_ASYNC(name, value_type, element)                                     \
  VRAMSPILL_SUBMISSION(name, (CUdeviceptr dst, value_type value, size_t count, CUstream stream), \
                       (dst, value, count, stream),                                           \
                       VRAMSPILL_RANGES(stream, {dst, count * element}))
#define VRAMSPILL_MEMSET_2D(name, value_type, element)                                          \
  VRAMSPILL_SUBMISSION(name,                                                                    \
                       (CUdeviceptr dst, size_t pitch, value_type value, size_t width,          \
                        size_t height),                                                         \
                       (dst, pitch, value, width, height),                                      \
                       VRAMSPILL_RANGES(nullptr, pitched(dst, pitch, width * element, height)))
#define VRAMSPILL_MEMSET_2D_ASYNC(name, value_type, element)                                   \
  VRAMSPILL_SUBMISSION(name,                                                                   \
                       (CUdeviceptr dst, size_t pitch, value_type value, size_t width,         \
                        size_t height, CUstream stream),                                       \
                       (dst, pitch, value, width, height, stream),                             \
                       VRAMSPILL_RANGES(stream, pitched(dst, pitch, width * element, height)))
VRAMSPILL_MEMSET(cuMemsetD8_v2, unsigned char, 1)
VRAMSPILL_MEMSET(cuMemsetD8_v2_ptds, unsigned char, 1)
VRAMSPILL_MEMSET(cuMemsetD16_v2, unsigned short, 2)
VRAMSPILL_MEMSET(cuMemsetD16_v2_ptds, unsigned short, 2)
VRAMSPILL_MEMSET(cuMemsetD32_v2, unsigned int, 4)
VRAMSPILL_MEMSET(cuMemsetD32_v2_ptds, unsigned int, 4)
VRAMSPILL_MEMSET_ASYNC(cuMemsetD8Async, unsigned char, 1)
VRAMSPILL_MEMSET_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1)
VRAMSPILL_MEMSET_ASYNC(cuMemsetD16Async, unsigned short, 2)
VRAMSPILL_MEMSET_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2)
VRAMSPILL_MEMSET_ASYNC(cuMemsetD32Async, unsigned int, 4)
VRAMSPILL_MEMSET_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4)
VRAMSPILL_MEMSET_2D(cuMemsetD2D8_v2, unsigned char, 1)
VRAMSPILL_MEMSET_2D(cuMemsetD2D8_v2_ptds, unsigned char, 1)
VRAMSPILL_MEMSET_2D(cuMemsetD2D16_v2, unsigned short, 2)
VRAMSPILL_MEMSET_2D(cuMemsetD2D16_v2_ptds, unsigned short, 2)
VRAMSPILL_MEMSET_2D(cuMemsetD2D32_v2, unsigned int, 4)
VRAMSPILL_MEMSET_2D(cuMemsetD2D32_v2_ptds, unsigned int, 4)
VRAMSPILL_MEMSET_2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1)
VRAMSPILL_MEMSET_2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, 1)
VRAMSPILL_MEMSET_2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2)
VRAMSPILL_MEMSET_2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, 2)
VRAMSPILL_MEMSET_2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4)
VRAMSPILL_MEMSET_2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, 4)

// --- Stream memory operations and decompression -------------------------------------------------

// A value written to, or waited for at, one address in stream order.
#define VRAMSPILL_STREAM_VALUE(name, value_type)                                            \
  VRAMSPILL_SUBMISSION(name, (CUstream stream, CUdeviceptr addr, value_type value,          \
                              unsigned int flags),                                          \
                       (stream, addr, value, flags),                                        \
                       VRAMSPILL_RANGES(stream, {addr, sizeof(value_type)}))
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue32, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue32_ptsz, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue32_v2, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue32_v2_ptsz, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue32, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue32_ptsz, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue32_v2, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue32_v2_ptsz, cuuint32_t)
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue64, cuuint64_t)
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue64_ptsz, cuuint64_t)
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue64_v2, cuuint64_t)
VRAMSPILL_STREAM_VALUE(cuStreamWriteValue64_v2_ptsz, cuuint64_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue64, cuuint64_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue64_ptsz, cuuint64_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue64_v2, cuuint64_t)
VRAMSPILL_STREAM_VALUE(cuStreamWaitValue64_v2_ptsz, cuuint64_t)

// Rare enough to be taken as touching everything: batches of the operations above, and the
// decompression engine's batches, each with addresses and sizes of its own.
#define VRAMSPILL_STREAM_BATCH_MEM_OP(name)                                                 \
  VRAMSPILL_SUBMISSION(name, (CUstream stream, unsigned int count,                          \
                              CUstreamBatchMemOpParams * paramArray, unsigned int flags),   \
                       (stream, count, paramArray, flags),                                  \
                       shim->use.record_everything(stream_of(stream), use))
VRAMSPILL_STREAM_BATCH_MEM_OP(cuStreamBatchMemOp)
VRAMSPILL_STREAM_BATCH_MEM_OP(cuStreamBatchMemOp_ptsz)
VRAMSPILL_STREAM_BATCH_MEM_OP(cuStreamBatchMemOp_v2)
VRAMSPILL_STREAM_BATCH_MEM_OP(cuStreamBatchMemOp_v2_ptsz)

#define VRAMSPILL_DECOMPRESS(name)                                                          \
  VRAMSPILL_SUBMISSION(name, (CUmemDecompressParams * paramsArray, size_t count,            \
                              unsigned int flags, size_t * errorIndex, CUstream stream),    \
                       (paramsArray, count, flags, errorIndex, stream),                     \
                       shim->use.record_everything(stream_of(stream), use))
VRAMSPILL_DECOMPRESS(cuMemBatchDecompressAsync)
VRAMSPILL_DECOMPRESS(cuMemBatchDecompressAsync_ptsz)

// --- Unloading code: forget the layouts of its functions (Note [The parameter layout cache]) ----

VRAMSPILL_HOOK CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  VRAMSPILL_REAL_OR_RETURN(real, cuModuleUnload);
  vramspill::hooks::forget_parameter_layouts();
  return real(hmod);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  VRAMSPILL_REAL_OR_RETURN(real, cuLibraryUnload);
  vramspill::hooks::forget_parameter_layouts();
  return real(library);
}
