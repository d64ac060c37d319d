// Note [The driver table]
// Every driver export vramspill calls or hooks, by its exact exported (versioned) name. One list
// serves three purposes: the real-driver pointer table (real_driver.h), the hooks handed out in
// place of the driver's own pointers (hooks/hook_table.cpp), and the forwarding of hooked calls.
// An export's C type is taken from cuda.h (compiled with __CUDA_API_VERSION_INTERNAL, which
// declares every versioned and per-thread name), so a hook can never have another ABI than the
// export it replaces.
//
// X(name) for functions the shim hooks: the program's call lands in the shim, which forwards to
// the real `name`. The unversioned cuMemAlloc, cuMemAllocPitch and cuMemFree are the 32-bit ABI
// of CUDA 2.0 (hooks/legacy_allocation_hooks.cpp), not the _v2 ones that cuda.h's macros name.
// Y(name) for functions the shim only calls.
#pragma once

#define VRAMSPILL_HOOKED_ALLOCATION_FUNCTIONS(X) \
  X(cuInit)                                      \
  X(cuGetProcAddress)                            \
  X(cuGetProcAddress_v2)                         \
  X(cuMemAlloc_v2)                               \
  X(cuMemAllocPitch_v2)                          \
  X(cuMemAlloc)                                  \
  X(cuMemAllocPitch)                             \
  X(cuMemAllocManaged)                           \
  X(cuMemAllocAsync)                             \
  X(cuMemAllocAsync_ptsz)                        \
  X(cuMemAllocFromPoolAsync)                     \
  X(cuMemAllocFromPoolAsync_ptsz)                \
  X(cuMemPoolCreate)                             \
  X(cuMemPoolDestroy)                            \
  X(cuMemPoolTrimTo)                             \
  X(cuMemFree_v2)                                \
  X(cuMemFreeAsync)                              \
  X(cuMemFreeAsync_ptsz)                         \
  X(cuMemFree)                                   \
  X(cuMemCreate)                                 \
  X(cuMemRelease)                                \
  X(cuMemMap)                                    \
  X(cuMemUnmap)                                  \
  X(cuMemRetainAllocationHandle)                 \
  X(cuMulticastCreate)                           \
  X(cuMulticastAddDevice)                        \
  X(cuMulticastBindMem)                          \
  X(cuMulticastBindAddr)                         \
  X(cuMulticastUnbind)                           \
  X(cuMemGetInfo_v2)                             \
  X(cuArrayCreate_v2)                            \
  X(cuArray3DCreate_v2)                          \
  X(cuArrayDestroy)                              \
  X(cuMipmappedArrayCreate)                      \
  X(cuMipmappedArrayDestroy)                     \
  X(cuIpcGetMemHandle)                           \
  X(cuMemGetAddressRange_v2)                     \
  X(cuPointerGetAttribute)                       \
  X(cuPointerGetAttributes)                      \
  X(cuMemHostAlloc)                              \
  X(cuMemAllocHost_v2)                           \
  X(cuMemHostRegister_v2)                        \
  X(cuMemFreeHost)                               \
  X(cuMemHostUnregister)

// Every submission: launches, copies, memsets, graph launches, host functions, stream memory
// operations and decompression, each telling the use tracker what it may touch before it reaches
// the driver (hooks/submission_hooks.cpp, shim/README.md, "Use tracking"). ctest -R
// submissions_are_tracked holds this list to every cuLaunch*, cuMemcpy*, cuMemset*,
// cuGraphLaunch*, cuStreamWriteValue*, cuStreamWaitValue*, cuStreamBatchMemOp* and
// cuMemBatchDecompress* export of the toolkit's headers.
#define VRAMSPILL_HOOKED_SUBMISSION_FUNCTIONS(X) \
  X(cuLaunchKernel)                              \
  X(cuLaunchKernel_ptsz)                         \
  X(cuLaunchKernelEx)                            \
  X(cuLaunchKernelEx_ptsz)                       \
  X(cuLaunchCooperativeKernel)                   \
  X(cuLaunchCooperativeKernel_ptsz)              \
  X(cuLaunchHostFunc)                            \
  X(cuLaunchHostFunc_ptsz)                       \
  X(cuGraphLaunch)                               \
  X(cuGraphLaunch_ptsz)                          \
  X(cuMemcpy)                                    \
  X(cuMemcpy_ptds)                               \
  X(cuMemcpyAsync)                               \
  X(cuMemcpyAsync_ptsz)                          \
  X(cuMemcpyPeer)                                \
  X(cuMemcpyPeer_ptds)                           \
  X(cuMemcpyPeerAsync)                           \
  X(cuMemcpyPeerAsync_ptsz)                      \
  X(cuMemcpyHtoD_v2)                             \
  X(cuMemcpyHtoD_v2_ptds)                        \
  X(cuMemcpyDtoH_v2)                             \
  X(cuMemcpyDtoH_v2_ptds)                        \
  X(cuMemcpyDtoD_v2)                             \
  X(cuMemcpyDtoD_v2_ptds)                        \
  X(cuMemcpyDtoA_v2)                             \
  X(cuMemcpyDtoA_v2_ptds)                        \
  X(cuMemcpyAtoD_v2)                             \
  X(cuMemcpyAtoD_v2_ptds)                        \
  X(cuMemcpyHtoDAsync_v2)                        \
  X(cuMemcpyHtoDAsync_v2_ptsz)                   \
  X(cuMemcpyDtoHAsync_v2)                        \
  X(cuMemcpyDtoHAsync_v2_ptsz)                   \
  X(cuMemcpyDtoDAsync_v2)                        \
  X(cuMemcpyDtoDAsync_v2_ptsz)                   \
  X(cuMemcpy2D_v2)                               \
  X(cuMemcpy2D_v2_ptds)                          \
  X(cuMemcpy2DUnaligned_v2)                      \
  X(cuMemcpy2DUnaligned_v2_ptds)                 \
  X(cuMemcpy2DAsync_v2)                          \
  X(cuMemcpy2DAsync_v2_ptsz)                     \
  X(cuMemcpy3D_v2)                               \
  X(cuMemcpy3D_v2_ptds)                          \
  X(cuMemcpy3DAsync_v2)                          \
  X(cuMemcpy3DAsync_v2_ptsz)                     \
  X(cuMemcpy3DPeer)                              \
  X(cuMemcpy3DPeer_ptds)                         \
  X(cuMemcpy3DPeerAsync)                         \
  X(cuMemcpy3DPeerAsync_ptsz)                    \
  X(cuMemcpyBatchAsync)                          \
  X(cuMemcpyBatchAsync_ptsz)                     \
  X(cuMemcpyBatchAsync_v2)                       \
  X(cuMemcpy3DBatchAsync)                        \
  X(cuMemcpy3DBatchAsync_ptsz)                   \
  X(cuMemcpy3DBatchAsync_v2)                     \
  X(cuMemcpyBatchAsync_v2_ptsz)                  \
  X(cuMemcpy3DBatchAsync_v2_ptsz)                \
  X(cuMemsetD8_v2)                               \
  X(cuMemsetD8_v2_ptds)                          \
  X(cuMemsetD16_v2)                              \
  X(cuMemsetD16_v2_ptds)                         \
  X(cuMemsetD32_v2)                              \
  X(cuMemsetD32_v2_ptds)                         \
  X(cuMemsetD2D8_v2)                             \
  X(cuMemsetD2D8_v2_ptds)                        \
  X(cuMemsetD2D16_v2)                            \
  X(cuMemsetD2D16_v2_ptds)                       \
  X(cuMemsetD2D32_v2)                            \
  X(cuMemsetD2D32_v2_ptds)                       \
  X(cuMemsetD8Async)                             \
  X(cuMemsetD8Async_ptsz)                        \
  X(cuMemsetD16Async)                            \
  X(cuMemsetD16Async_ptsz)                       \
  X(cuMemsetD32Async)                            \
  X(cuMemsetD32Async_ptsz)                       \
  X(cuMemsetD2D8Async)                           \
  X(cuMemsetD2D8Async_ptsz)                      \
  X(cuMemsetD2D16Async)                          \
  X(cuMemsetD2D16Async_ptsz)                     \
  X(cuMemsetD2D32Async)                          \
  X(cuMemsetD2D32Async_ptsz)                     \
  X(cuStreamWriteValue32)                        \
  X(cuStreamWriteValue32_ptsz)                   \
  X(cuStreamWriteValue32_v2)                     \
  X(cuStreamWriteValue32_v2_ptsz)                \
  X(cuStreamWaitValue32)                         \
  X(cuStreamWaitValue32_ptsz)                    \
  X(cuStreamWaitValue32_v2)                      \
  X(cuStreamWaitValue32_v2_ptsz)                 \
  X(cuStreamWriteValue64)                        \
  X(cuStreamWriteValue64_ptsz)                   \
  X(cuStreamWriteValue64_v2)                     \
  X(cuStreamWriteValue64_v2_ptsz)                \
  X(cuStreamWaitValue64)                         \
  X(cuStreamWaitValue64_ptsz)                    \
  X(cuStreamWaitValue64_v2)                      \
  X(cuStreamWaitValue64_v2_ptsz)                 \
  X(cuStreamBatchMemOp)                          \
  X(cuStreamBatchMemOp_ptsz)                     \
  X(cuStreamBatchMemOp_v2)                       \
  X(cuStreamBatchMemOp_v2_ptsz)                  \
  X(cuMemBatchDecompressAsync)                   \
  X(cuMemBatchDecompressAsync_ptsz)

// Unloading code: a CUfunction's value may come back for another kernel, so the parameter
// layouts cached per CUfunction are forgotten (Note [The parameter layout cache]).
#define VRAMSPILL_HOOKED_UNLOAD_FUNCTIONS(X) \
  X(cuModuleUnload)                          \
  X(cuLibraryUnload)

// Stream capture: tiered mode moves nothing while a capture is in progress (Note [No moves during
// a capture] in placement/tiered_placement.h), so the shim counts them (hooks/capture_hooks.cpp).
// The unversioned cuStreamBeginCapture(_ptsz) is CUDA 10.0's, without a mode argument;
// cuStreamBeginCaptureToGraph (CUDA 12.3) captures into a graph the program made.
#define VRAMSPILL_HOOKED_CAPTURE_FUNCTIONS(X) \
  X(cuStreamBeginCapture)                     \
  X(cuStreamBeginCapture_ptsz)                \
  X(cuStreamBeginCapture_v2)                  \
  X(cuStreamBeginCapture_v2_ptsz)             \
  X(cuStreamBeginCaptureToGraph)              \
  X(cuStreamBeginCaptureToGraph_ptsz)         \
  X(cuStreamEndCapture)                       \
  X(cuStreamEndCapture_ptsz)

// Executable graphs: what each one touches is read from its graph's nodes when it is instantiated,
// re-read when it is updated and forgotten when it is destroyed, so that cuGraphLaunch names its
// blocks (Note [Reading a graph] in core/graph_uses.h; hooks/graph_hooks.cpp). Every export of
// instantiation and update: cudart 12+ resolves cuGraphInstantiateWithFlags and
// cuGraphInstantiateWithParams, older programs the 5-argument ABIs.
#define VRAMSPILL_HOOKED_GRAPH_FUNCTIONS(X) \
  X(cuGraphInstantiate)                     \
  X(cuGraphInstantiate_v2)                  \
  X(cuGraphInstantiateWithFlags)            \
  X(cuGraphInstantiateWithParams)           \
  X(cuGraphInstantiateWithParams_ptsz)      \
  X(cuGraphExecDestroy)                     \
  X(cuGraphExecKernelNodeSetParams)         \
  X(cuGraphExecKernelNodeSetParams_v2)      \
  X(cuGraphExecMemcpyNodeSetParams)         \
  X(cuGraphExecMemsetNodeSetParams)         \
  X(cuGraphExecBatchMemOpNodeSetParams)     \
  X(cuGraphExecChildGraphNodeSetParams)     \
  X(cuGraphExecNodeSetParams)               \
  X(cuGraphExecUpdate)                      \
  X(cuGraphExecUpdate_v2)

// Streams and contexts the program destroys: the tracked window must no longer wait on their
// streams (Note [Stream slots] in core/stream_slots.h; hooks/stream_end_hooks.cpp). The program's
// references to primary contexts are counted, so that its last release resets the context under
// the shim too (Note [The last release of a primary context] in hooks/device_reset.h).
#define VRAMSPILL_HOOKED_STREAM_END_FUNCTIONS(X) \
  X(cuStreamDestroy)                             \
  X(cuStreamDestroy_v2)                          \
  X(cuCtxDestroy_v2)                             \
  X(cuDevicePrimaryCtxReset)                     \
  X(cuDevicePrimaryCtxReset_v2)                  \
  X(cuDevicePrimaryCtxRetain)                    \
  X(cuDevicePrimaryCtxRelease)                   \
  X(cuDevicePrimaryCtxRelease_v2)

#define VRAMSPILL_CALLED_FUNCTIONS(Y) \
  Y(cuCtxGetDevice)                   \
  Y(cuCtxGetCurrent)                  \
  Y(cuCtxSynchronize)                 \
  Y(cuCtxPushCurrent_v2)              \
  Y(cuCtxPopCurrent_v2)               \
  Y(cuDevicePrimaryCtxGetState)       \
  Y(cuDeviceGetAttribute)             \
  Y(cuDeviceGetCount)                 \
  Y(cuDeviceGet)                      \
  Y(cuDeviceTotalMem_v2)              \
  Y(cuDeviceGetMemPool)               \
  Y(cuDeviceGetDefaultMemPool)        \
  Y(cuMemPoolGetAttribute)            \
  Y(cuMemAdvise)                      \
  Y(cuMemAdvise_v2)                   \
  Y(cuMemPrefetchAsync)               \
  Y(cuMemPrefetchAsync_v2)            \
  Y(cuMemHostGetDevicePointer_v2)     \
  Y(cuStreamIsCapturing)              \
  Y(cuStreamGetDevice)                \
  Y(cuStreamGetCtx)                   \
  Y(cuStreamSynchronize)              \
  Y(cuStreamQuery)                    \
  Y(cuStreamWaitEvent)                \
  Y(cuEventCreate)                    \
  Y(cuEventRecord)                    \
  Y(cuEventSynchronize)               \
  Y(cuEventQuery)                     \
  Y(cuEventDestroy_v2)                \
  Y(cuFuncGetParamInfo)               \
  Y(cuKernelGetParamInfo)             \
  Y(cuDeviceCanAccessPeer)            \
  Y(cuMemAddressReserve)              \
  Y(cuMemAddressFree)                 \
  Y(cuMemSetAccess)                   \
  Y(cuStreamCreate)                   \
  Y(cuMemGetAllocationGranularity)   \
  Y(cuGraphGetNodes)                  \
  Y(cuGraphNodeGetType)               \
  Y(cuGraphKernelNodeGetParams_v2)    \
  Y(cuGraphMemcpyNodeGetParams)       \
  Y(cuGraphMemsetNodeGetParams)       \
  Y(cuGraphChildGraphNodeGetGraph)    \
  Y(cuGraphBatchMemOpNodeGetParams)

#define VRAMSPILL_HOOKED_FUNCTIONS(X)       \
  VRAMSPILL_HOOKED_ALLOCATION_FUNCTIONS(X)  \
  VRAMSPILL_HOOKED_SUBMISSION_FUNCTIONS(X)  \
  VRAMSPILL_HOOKED_UNLOAD_FUNCTIONS(X)      \
  VRAMSPILL_HOOKED_CAPTURE_FUNCTIONS(X)     \
  VRAMSPILL_HOOKED_GRAPH_FUNCTIONS(X)       \
  VRAMSPILL_HOOKED_STREAM_END_FUNCTIONS(X)

#define VRAMSPILL_DRIVER_FUNCTIONS(X) \
  VRAMSPILL_HOOKED_FUNCTIONS(X)       \
  VRAMSPILL_CALLED_FUNCTIONS(X)
