// Stream memory operations: cuStreamWriteValue32/64 write a value into memory in stream order,
// in all four of each one's exports (the 8.0 and 11.7 ABIs, each with a per-thread form, which
// cuda.h does not declare for 11.7: cudart hands it out as cuStreamWriteValue32_v2_ptsz).
// cuStreamWaitValue32/64 and cuStreamBatchMemOp stay the generated stubs' CUDA_ERROR_NOT_SUPPORTED:
// a wait that blocks a stream until another writes would need the stream workers to poll memory.
#include "core/api.h"
#include "core/context.h"
#include "core/copy_engine.h"
#include "core/submit.h"

using simcuda::DefaultStream;
using simcuda::Stream;

namespace {

template <typename Value>
CUresult write_value(DefaultStream null_means, CUstream hStream, CUdeviceptr addr, Value value,
                     unsigned int flags) {
  if ((flags & ~static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0 ||
      addr % sizeof(Value) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = simcuda::resolve_stream(hStream, null_means, &stream);
      result != CUDA_SUCCESS)
    return result;
  if (CUresult result = simcuda::check_range(addr, sizeof(Value), simcuda::Access::kWrite);
      result != CUDA_SUCCESS)
    return result;
  return simcuda::submit_async(
      *stream, simcuda::value_write_work(*stream->context(), addr, value, sizeof(Value)), nullptr,
      {"stream write value", {{addr, sizeof(Value)}}});
}

}  // namespace

#define SIMCUDA_WRITE_VALUE_EXPORTS(name, pt_name, value_type)                                   \
  SIMCUDA_DEFAULT_STREAM_EXPORTS(name, pt_name, write_value<value_type>,                         \
                                 (CUstream stream, CUdeviceptr addr, value_type value,           \
                                  unsigned int flags),                                           \
                                 stream, addr, value, flags)
SIMCUDA_WRITE_VALUE_EXPORTS(cuStreamWriteValue32, cuStreamWriteValue32_ptsz, cuuint32_t)
SIMCUDA_WRITE_VALUE_EXPORTS(cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz, cuuint32_t)
SIMCUDA_WRITE_VALUE_EXPORTS(cuStreamWriteValue64, cuStreamWriteValue64_ptsz, cuuint64_t)
SIMCUDA_WRITE_VALUE_EXPORTS(cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz, cuuint64_t)
