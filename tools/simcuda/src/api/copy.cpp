// Copies: cuMemcpy*, synchronous and asynchronous, linear, peer and pitched.
//
// Pointers are checked when the call is made (core/copy_engine.h); the bytes move later on the
// stream's worker thread, so an asynchronous copy races with the program exactly as it would on
// a GPU. Host memory follows the driver's documented rules:
// - a synchronous copy is queued on the (legacy or per-thread) default stream and waited for,
//   which is the strictest of the driver's synchronous behaviours;
// - an asynchronous copy from pageable memory is staged at call time, so the program may reuse
//   the source at once; one into pageable memory returns only once complete;
// - pinned (page-locked or registered) memory is read and written when the copy runs, so reusing
//   a pinned source before synchronising shows the race.
// In stream capture nothing is staged or waited for: the graph copies from the host pointers when
// it is launched, as a captured memcpy node does.
#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/copy_engine.h"
#include "core/host_clock.h"
#include "core/submit.h"

using simcuda::Copy2D;
using simcuda::DefaultStream;
using simcuda::MemoryPlace;
using simcuda::Stream;

namespace {

// What the export's signature says a pointer is: device memory, or host memory (which with
// unified addressing may also be a device pointer, as any pointer of cuMemcpy may).
enum class Side { kDevice, kHostOrAny };

struct CopyRequest {
  Copy2D copy;
  Side dst_side = Side::kDevice;
  Side src_side = Side::kDevice;
};

uint64_t address_of(const void* pointer) { return reinterpret_cast<uint64_t>(pointer); }

Copy2D linear(uint64_t dst, uint64_t src, size_t bytes) {
  return {.dst = dst, .dst_pitch = bytes, .src = src, .src_pitch = bytes, .width = bytes};
}

CUresult check_side(Side side, uint64_t address, uint64_t pitch, const Copy2D& copy,
                    simcuda::Access access, MemoryPlace* place) {
  const uint64_t extent = simcuda::region_extent(pitch, copy.width, copy.height);
  if (side == Side::kHostOrAny) return simcuda::check_host_pointer(address, extent, access, place);
  *place = simcuda::place_of(address);
  return simcuda::check_range(address, extent, access);
}

bool empty(const Copy2D& copy) { return copy.width == 0 || copy.height == 0; }

// The copy as its graph node reports it (Note [Inspectable nodes] in core/graph_nodes.h).
std::shared_ptr<simcuda::GraphNode> copy_node(const CopyRequest& request) {
  const auto memory_type = [](Side side) {
    return side == Side::kDevice ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_UNIFIED;
  };
  const Copy2D& copy = request.copy;
  auto node = std::make_shared<simcuda::GraphNode>();
  node->type = CU_GRAPH_NODE_TYPE_MEMCPY;
  CUDA_MEMCPY3D& c = node->copy;
  c.srcMemoryType = memory_type(request.src_side);
  c.srcDevice = copy.src;
  c.srcPitch = copy.src_pitch;
  c.srcHeight = copy.height;
  c.dstMemoryType = memory_type(request.dst_side);
  c.dstDevice = copy.dst;
  c.dstPitch = copy.dst_pitch;
  c.dstHeight = copy.height;
  c.WidthInBytes = copy.width;
  c.Height = copy.height;
  c.Depth = 1;
  return node;
}

// Resolves the stream and checks both sides; `*places` gets {dst, src}. An empty copy has no
// sides to check: its callers stop after this, with the stream's result.
CUresult prepare(DefaultStream null_means, CUstream hStream, const CopyRequest& request,
                 Stream** stream, MemoryPlace places[2]) {
  if (CUresult result = simcuda::resolve_stream(hStream, null_means, stream);
      result != CUDA_SUCCESS || empty(request.copy))
    return result;
  const Copy2D& copy = request.copy;
  if (CUresult result = check_side(request.dst_side, copy.dst, copy.dst_pitch, copy,
                                   simcuda::Access::kWrite, &places[0]);
      result != CUDA_SUCCESS)
    return result;
  return check_side(request.src_side, copy.src, copy.src_pitch, copy, simcuda::Access::kRead,
                    &places[1]);
}

CUresult copy_sync(DefaultStream null_means, const CopyRequest& request) {
  Stream* stream = nullptr;
  MemoryPlace places[2];
  if (CUresult result = prepare(null_means, nullptr, request, &stream, places);
      result != CUDA_SUCCESS || empty(request.copy))
    return result;
  return simcuda::submit_sync(*stream, simcuda::copy_work(*stream->context(), request.copy),
                              /*wait=*/true, simcuda::copy_footprint(request.copy));
}

CUresult copy_async(DefaultStream null_means, CUstream hStream, CopyRequest request) {
  Stream* stream = nullptr;
  MemoryPlace places[2];
  if (CUresult result = prepare(null_means, hStream, request, &stream, places);
      result != CUDA_SUCCESS || empty(request.copy))
    return result;
  const bool capturing = simcuda::stream_is_capturing(*stream);
  simcuda::Footprint footprint = simcuda::copy_footprint(request.copy);  // before staging
  std::shared_ptr<std::vector<unsigned char>> staging;
  if (!capturing && places[1] == MemoryPlace::kPageableHost)
    staging = simcuda::stage_source(request.copy);
  simcuda::Placement placement;
  const CUresult result = simcuda::submit_async(
      *stream, simcuda::copy_work(*stream->context(), request.copy, std::move(staging)), &placement,
      std::move(footprint), copy_node(request));
  if (result == CUDA_SUCCESS && placement.capture_id == 0 &&
      places[0] == MemoryPlace::kPageableHost)
    simcuda::host_wait({stream, placement.sequence});
  return result;
}

// --- linear copies -------------------------------------------------------------------------

CUresult htod(DefaultStream d, CUdeviceptr dst, const void* src, size_t n) {
  return copy_sync(d, {linear(dst, address_of(src), n), Side::kDevice, Side::kHostOrAny});
}
CUresult dtoh(DefaultStream d, void* dst, CUdeviceptr src, size_t n) {
  return copy_sync(d, {linear(address_of(dst), src, n), Side::kHostOrAny, Side::kDevice});
}
CUresult dtod(DefaultStream d, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy_sync(d, {linear(dst, src, n), Side::kDevice, Side::kDevice});
}
CUresult unified(DefaultStream d, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy_sync(d, {linear(dst, src, n), Side::kHostOrAny, Side::kHostOrAny});
}
CUresult htod_async(DefaultStream d, CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return copy_async(d, s, {linear(dst, address_of(src), n), Side::kDevice, Side::kHostOrAny});
}
CUresult dtoh_async(DefaultStream d, void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy_async(d, s, {linear(address_of(dst), src, n), Side::kHostOrAny, Side::kDevice});
}
CUresult dtod_async(DefaultStream d, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy_async(d, s, {linear(dst, src, n), Side::kDevice, Side::kDevice});
}
CUresult unified_async(DefaultStream d, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy_async(d, s, {linear(dst, src, n), Side::kHostOrAny, Side::kHostOrAny});
}

// With unified addressing a peer copy is a copy between two pointers; the contexts must live.
CUresult check_peer_contexts(CUcontext dst_context, CUcontext src_context) {
  return simcuda::context_from_handle(dst_context) != nullptr &&
                 simcuda::context_from_handle(src_context) != nullptr
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult peer(DefaultStream d, CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
              CUcontext src_context, size_t n) {
  if (CUresult result = check_peer_contexts(dst_context, src_context); result != CUDA_SUCCESS)
    return result;
  return dtod(d, dst, src, n);
}
CUresult peer_async(DefaultStream d, CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                    CUcontext src_context, size_t n, CUstream s) {
  if (CUresult result = check_peer_contexts(dst_context, src_context); result != CUDA_SUCCESS)
    return result;
  return dtod_async(d, dst, src, n, s);
}

// --- pitched copies ------------------------------------------------------------------------

CUresult side_of(CUmemorytype type, const void* host, CUdeviceptr device, Side* side,
                 uint64_t* address) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      *side = Side::kHostOrAny;
      *address = address_of(host);
      break;
    case CU_MEMORYTYPE_DEVICE:
      *side = Side::kDevice;
      *address = device;
      break;
    case CU_MEMORYTYPE_UNIFIED:
      *side = Side::kHostOrAny;
      *address = device;
      break;
    case CU_MEMORYTYPE_ARRAY:
      return CUDA_ERROR_NOT_SUPPORTED;  // simcuda has no CUDA arrays
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult request_2d(const CUDA_MEMCPY2D* p, CopyRequest* request) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t src = 0, dst = 0;
  if (CUresult result =
          side_of(p->srcMemoryType, p->srcHost, p->srcDevice, &request->src_side, &src);
      result != CUDA_SUCCESS)
    return result;
  if (CUresult result =
          side_of(p->dstMemoryType, p->dstHost, p->dstDevice, &request->dst_side, &dst);
      result != CUDA_SUCCESS)
    return result;
  if (p->Height > 1 && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes))
    return CUDA_ERROR_INVALID_VALUE;
  Copy2D& copy = request->copy;
  copy.width = p->WidthInBytes;
  copy.height = p->Height;
  copy.src_pitch = std::max<uint64_t>(p->srcPitch, copy.width);
  copy.dst_pitch = std::max<uint64_t>(p->dstPitch, copy.width);
  copy.src = src + p->srcY * p->srcPitch + p->srcXInBytes;
  copy.dst = dst + p->dstY * p->dstPitch + p->dstXInBytes;
  return CUDA_SUCCESS;
}

CUresult copy_2d(DefaultStream d, const CUDA_MEMCPY2D* pCopy) {
  CopyRequest request;
  if (CUresult result = request_2d(pCopy, &request); result != CUDA_SUCCESS) return result;
  return copy_sync(d, request);
}
CUresult copy_2d_async(DefaultStream d, const CUDA_MEMCPY2D* pCopy, CUstream s) {
  CopyRequest request;
  if (CUresult result = request_2d(pCopy, &request); result != CUDA_SUCCESS) return result;
  return copy_async(d, s, request);
}

// The pre-3.2 ABI's descriptor, with 32-bit fields.
CUDA_MEMCPY2D widen(const CUDA_MEMCPY2D_v1& v1) {
  return {.srcXInBytes = v1.srcXInBytes,
          .srcY = v1.srcY,
          .srcMemoryType = v1.srcMemoryType,
          .srcHost = v1.srcHost,
          .srcDevice = v1.srcDevice,
          .srcArray = v1.srcArray,
          .srcPitch = v1.srcPitch,
          .dstXInBytes = v1.dstXInBytes,
          .dstY = v1.dstY,
          .dstMemoryType = v1.dstMemoryType,
          .dstHost = v1.dstHost,
          .dstDevice = v1.dstDevice,
          .dstArray = v1.dstArray,
          .dstPitch = v1.dstPitch,
          .WidthInBytes = v1.WidthInBytes,
          .Height = v1.Height};
}
CUresult copy_2d_v1(const CUDA_MEMCPY2D_v1* pCopy, CUstream s, bool async) {
  if (pCopy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY2D copy = widen(*pCopy);
  return async ? copy_2d_async(DefaultStream::kLegacy, &copy, s)
               : copy_2d(DefaultStream::kLegacy, &copy);
}

}  // namespace

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, htod,
                               (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount),
                               dstDevice, srcHost, ByteCount)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, dtoh,
                               (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount), dstHost,
                               srcDevice, ByteCount)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, dtod,
                               (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
                               dstDevice, srcDevice, ByteCount)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpy, cuMemcpy_ptds, unified,
                               (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), dst, src,
                               ByteCount)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, htod_async,
                               (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                CUstream hStream),
                               dstDevice, srcHost, ByteCount, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, dtoh_async,
                               (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                CUstream hStream),
                               dstHost, srcDevice, ByteCount, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, dtod_async,
                               (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                CUstream hStream),
                               dstDevice, srcDevice, ByteCount, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyAsync, cuMemcpyAsync_ptsz, unified_async,
                               (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                CUstream hStream),
                               dst, src, ByteCount, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyPeer, cuMemcpyPeer_ptds, peer,
                               (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                CUcontext srcContext, size_t ByteCount),
                               dstDevice, dstContext, srcDevice, srcContext, ByteCount)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz, peer_async,
                               (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                CUcontext srcContext, size_t ByteCount, CUstream hStream),
                               dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, copy_2d,
                               (const CUDA_MEMCPY2D* pCopy), pCopy)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds, copy_2d,
                               (const CUDA_MEMCPY2D* pCopy), pCopy)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz, copy_2d_async,
                               (const CUDA_MEMCPY2D* pCopy, CUstream hStream), pCopy, hStream)

// The pre-3.2 ABI, with 32-bit device pointers and sizes. A simulated device address never fits
// in 32 bits, so these reach the same checks and refuse every device pointer, as a 64-bit
// driver's would for an address above 4 GiB.
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void* srcHost,
                                             unsigned int ByteCount) {
  SIMCUDA_ENTER("cuMemcpyHtoD");
  return htod(DefaultStream::kLegacy, dstDevice, srcHost, ByteCount);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpyDtoH(void* dstHost, CUdeviceptr_v1 srcDevice,
                                             unsigned int ByteCount) {
  SIMCUDA_ENTER("cuMemcpyDtoH");
  return dtoh(DefaultStream::kLegacy, dstHost, srcDevice, ByteCount);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                             unsigned int ByteCount) {
  SIMCUDA_ENTER("cuMemcpyDtoD");
  return dtod(DefaultStream::kLegacy, dstDevice, srcDevice, ByteCount);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void* srcHost,
                                                  unsigned int ByteCount, CUstream hStream) {
  SIMCUDA_ENTER("cuMemcpyHtoDAsync");
  return htod_async(DefaultStream::kLegacy, dstDevice, srcHost, ByteCount, hStream);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr_v1 srcDevice,
                                                  unsigned int ByteCount, CUstream hStream) {
  SIMCUDA_ENTER("cuMemcpyDtoHAsync");
  return dtoh_async(DefaultStream::kLegacy, dstHost, srcDevice, ByteCount, hStream);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice,
                                                  CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                                  CUstream hStream) {
  SIMCUDA_ENTER("cuMemcpyDtoDAsync");
  return dtod_async(DefaultStream::kLegacy, dstDevice, srcDevice, ByteCount, hStream);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D_v1* pCopy) {
  SIMCUDA_ENTER("cuMemcpy2D");
  return copy_2d_v1(pCopy, nullptr, /*async=*/false);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpy2DUnaligned(const CUDA_MEMCPY2D_v1* pCopy) {
  SIMCUDA_ENTER("cuMemcpy2DUnaligned");
  return copy_2d_v1(pCopy, nullptr, /*async=*/false);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D_v1* pCopy, CUstream hStream) {
  SIMCUDA_ENTER("cuMemcpy2DAsync");
  return copy_2d_v1(pCopy, hStream, /*async=*/true);
}
