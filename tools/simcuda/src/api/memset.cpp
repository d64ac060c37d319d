// Memsets: cuMemsetD8/D16/D32 and their pitched (D2D) forms, synchronous and asynchronous.
//
// The destination is checked at call time (core/copy_engine.h) and filled on the stream's worker
// thread. As documented for the driver, a synchronous memset is asynchronous with respect to the
// host unless the destination is pinned host memory or managed memory, when it completes before
// the call returns; it is queued on the (legacy or per-thread) default stream either way.
#include "core/api.h"
#include "core/context.h"
#include "core/copy_engine.h"
#include "core/driver.h"
#include "core/submit.h"

using simcuda::DefaultStream;
using simcuda::Fill;
using simcuda::Stream;

namespace {

bool host_visible(uint64_t address) {
  const std::optional<simcuda::Allocation> found =
      simcuda::Driver::instance()->allocations().find_containing(address);
  return found && (found->host_located || found->kind == simcuda::MemoryKind::kManaged);
}

CUresult check_fill(const Fill& fill) {
  uint64_t row_bytes = 0;
  if (__builtin_mul_overflow(fill.width, fill.element_size, &row_bytes))
    return CUDA_ERROR_INVALID_VALUE;
  // Elements must be naturally aligned, in every row.
  if (fill.dst % fill.element_size != 0) return CUDA_ERROR_INVALID_VALUE;
  if (fill.height > 1 && (fill.pitch < row_bytes || fill.pitch % fill.element_size != 0))
    return CUDA_ERROR_INVALID_VALUE;
  return simcuda::check_range(fill.dst, simcuda::region_extent(fill.pitch, row_bytes, fill.height),
                              simcuda::Access::kWrite);
}

CUresult fill_memory(DefaultStream null_means, CUstream hStream, bool async, const Fill& fill) {
  Stream* stream = nullptr;
  if (CUresult result = simcuda::resolve_stream(async ? hStream : nullptr, null_means, &stream);
      result != CUDA_SUCCESS)
    return result;
  if (fill.width == 0 || fill.height == 0) return CUDA_SUCCESS;
  if (CUresult result = check_fill(fill); result != CUDA_SUCCESS) return result;
  simcuda::StreamWork work = simcuda::fill_work(*stream->context(), fill);
  if (async) {
    // As its graph node reports it (Note [Inspectable nodes] in core/graph_nodes.h).
    auto node = std::make_shared<simcuda::GraphNode>();
    node->type = CU_GRAPH_NODE_TYPE_MEMSET;
    node->fill = {.dst = fill.dst,
                  .pitch = fill.pitch,
                  .value = fill.value,
                  .elementSize = fill.element_size,
                  .width = fill.width,
                  .height = fill.height};
    return simcuda::submit_async(*stream, std::move(work), nullptr, simcuda::fill_footprint(fill),
                                 std::move(node));
  }
  return simcuda::submit_sync(*stream, std::move(work), /*wait=*/host_visible(fill.dst),
                              simcuda::fill_footprint(fill));
}

Fill linear_fill(CUdeviceptr dst, uint32_t value, size_t count, unsigned int element_size) {
  return {.dst = dst,
          .pitch = count * element_size,
          .width = count,
          .height = 1,
          .element_size = element_size,
          .value = value};
}

Fill pitched_fill(CUdeviceptr dst, size_t pitch, uint32_t value, size_t width, size_t height,
                  unsigned int element_size) {
  return {.dst = dst,
          .pitch = pitch,
          .width = width,
          .height = height,
          .element_size = element_size,
          .value = value};
}

CUresult d8(DefaultStream d, CUdeviceptr dst, unsigned char value, size_t n) {
  return fill_memory(d, nullptr, false, linear_fill(dst, value, n, 1));
}
CUresult d16(DefaultStream d, CUdeviceptr dst, unsigned short value, size_t n) {
  return fill_memory(d, nullptr, false, linear_fill(dst, value, n, 2));
}
CUresult d32(DefaultStream d, CUdeviceptr dst, unsigned int value, size_t n) {
  return fill_memory(d, nullptr, false, linear_fill(dst, value, n, 4));
}
CUresult d8_async(DefaultStream d, CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  return fill_memory(d, s, true, linear_fill(dst, value, n, 1));
}
CUresult d16_async(DefaultStream d, CUdeviceptr dst, unsigned short value, size_t n, CUstream s) {
  return fill_memory(d, s, true, linear_fill(dst, value, n, 2));
}
CUresult d32_async(DefaultStream d, CUdeviceptr dst, unsigned int value, size_t n, CUstream s) {
  return fill_memory(d, s, true, linear_fill(dst, value, n, 4));
}
CUresult d2d8(DefaultStream d, CUdeviceptr dst, size_t pitch, unsigned char value, size_t w,
              size_t h) {
  return fill_memory(d, nullptr, false, pitched_fill(dst, pitch, value, w, h, 1));
}
CUresult d2d16(DefaultStream d, CUdeviceptr dst, size_t pitch, unsigned short value, size_t w,
               size_t h) {
  return fill_memory(d, nullptr, false, pitched_fill(dst, pitch, value, w, h, 2));
}
CUresult d2d32(DefaultStream d, CUdeviceptr dst, size_t pitch, unsigned int value, size_t w,
               size_t h) {
  return fill_memory(d, nullptr, false, pitched_fill(dst, pitch, value, w, h, 4));
}
CUresult d2d8_async(DefaultStream d, CUdeviceptr dst, size_t pitch, unsigned char value, size_t w,
                    size_t h, CUstream s) {
  return fill_memory(d, s, true, pitched_fill(dst, pitch, value, w, h, 1));
}
CUresult d2d16_async(DefaultStream d, CUdeviceptr dst, size_t pitch, unsigned short value, size_t w,
                     size_t h, CUstream s) {
  return fill_memory(d, s, true, pitched_fill(dst, pitch, value, w, h, 2));
}
CUresult d2d32_async(DefaultStream d, CUdeviceptr dst, size_t pitch, unsigned int value, size_t w,
                     size_t h, CUstream s) {
  return fill_memory(d, s, true, pitched_fill(dst, pitch, value, w, h, 4));
}

}  // namespace

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD8_v2, cuMemsetD8_v2_ptds, d8,
                               (CUdeviceptr dstDevice, unsigned char uc, size_t N), dstDevice, uc,
                               N)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD16_v2, cuMemsetD16_v2_ptds, d16,
                               (CUdeviceptr dstDevice, unsigned short us, size_t N), dstDevice, us,
                               N)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD32_v2, cuMemsetD32_v2_ptds, d32,
                               (CUdeviceptr dstDevice, unsigned int ui, size_t N), dstDevice, ui, N)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD8Async, cuMemsetD8Async_ptsz, d8_async,
                               (CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                CUstream hStream),
                               dstDevice, uc, N, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD16Async, cuMemsetD16Async_ptsz, d16_async,
                               (CUdeviceptr dstDevice, unsigned short us, size_t N,
                                CUstream hStream),
                               dstDevice, us, N, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD32Async, cuMemsetD32Async_ptsz, d32_async,
                               (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
                               dstDevice, ui, N, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds, d2d8,
                               (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                size_t Width, size_t Height),
                               dstDevice, dstPitch, uc, Width, Height)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds, d2d16,
                               (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                size_t Width, size_t Height),
                               dstDevice, dstPitch, us, Width, Height)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, d2d32,
                               (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                size_t Width, size_t Height),
                               dstDevice, dstPitch, ui, Width, Height)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz, d2d8_async,
                               (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                size_t Width, size_t Height, CUstream hStream),
                               dstDevice, dstPitch, uc, Width, Height, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz, d2d16_async,
                               (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                size_t Width, size_t Height, CUstream hStream),
                               dstDevice, dstPitch, us, Width, Height, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz, d2d32_async,
                               (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                size_t Width, size_t Height, CUstream hStream),
                               dstDevice, dstPitch, ui, Width, Height, hStream)

// The pre-3.2 ABI, with 32-bit device pointers and sizes (see api/copy.cpp).
SIMCUDA_EXPORT CUresult CUDAAPI cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc,
                                           unsigned int N) {
  SIMCUDA_ENTER("cuMemsetD8");
  return d8(DefaultStream::kLegacy, dstDevice, uc, N);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemsetD16(CUdeviceptr_v1 dstDevice, unsigned short us,
                                            unsigned int N) {
  SIMCUDA_ENTER("cuMemsetD16");
  return d16(DefaultStream::kLegacy, dstDevice, us, N);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui,
                                            unsigned int N) {
  SIMCUDA_ENTER("cuMemsetD32");
  return d32(DefaultStream::kLegacy, dstDevice, ui, N);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemsetD2D8(CUdeviceptr_v1 dstDevice, unsigned int dstPitch,
                                             unsigned char uc, unsigned int Width,
                                             unsigned int Height) {
  SIMCUDA_ENTER("cuMemsetD2D8");
  return d2d8(DefaultStream::kLegacy, dstDevice, dstPitch, uc, Width, Height);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemsetD2D16(CUdeviceptr_v1 dstDevice, unsigned int dstPitch,
                                              unsigned short us, unsigned int Width,
                                              unsigned int Height) {
  SIMCUDA_ENTER("cuMemsetD2D16");
  return d2d16(DefaultStream::kLegacy, dstDevice, dstPitch, us, Width, Height);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemsetD2D32(CUdeviceptr_v1 dstDevice, unsigned int dstPitch,
                                              unsigned int ui, unsigned int Width,
                                              unsigned int Height) {
  SIMCUDA_ENTER("cuMemsetD2D32");
  return d2d32(DefaultStream::kLegacy, dstDevice, dstPitch, ui, Width, Height);
}
