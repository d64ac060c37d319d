// Stream memory operations: cuStreamWriteValue32/64 write a value into memory in stream order,
// cuStreamWaitValue32/64 hold the stream until a value in memory meets a condition (Note
// [Waiting for a value] in core/copy_engine.h), and cuStreamBatchMemOp queues several of them as
// one piece of work, in order. Each in every export it has: the 8.0 and 11.7 ABIs, each with a
// per-thread form (cuda.h declares none for 11.7: cudart hands out cuStreamWriteValue32_v2_ptsz
// and the like). CU_STREAM_WAIT_VALUE_FLUSH and CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES are
// CUDA_ERROR_NOT_SUPPORTED, as on a device whose CAN_FLUSH_REMOTE_WRITES is 0.
#include <cstring>
#include <memory>
#include <vector>

#include "core/api.h"
#include "core/context.h"
#include "core/copy_engine.h"
#include "core/graph_nodes.h"
#include "core/submit.h"

using simcuda::DefaultStream;
using simcuda::Stream;

namespace {

// One operation, checked, ready to queue: its work, the bytes it touches, and what a graph node
// of it says.
struct ValueOperation {
  simcuda::StreamWork work;
  simcuda::AddressRange range;
  CUstreamBatchMemOpParams params;
};

bool is_write(CUstreamBatchMemOpType type) {
  return type == CU_STREAM_MEM_OP_WRITE_VALUE_32 || type == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}

unsigned width(CUstreamBatchMemOpType type) {
  return type == CU_STREAM_MEM_OP_WRITE_VALUE_64 || type == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? 8 : 4;
}

// A write or a wait of `type`, checked as the driver checks it.
CUresult value_operation(Stream& stream, CUstreamBatchMemOpType type, CUdeviceptr addr,
                         uint64_t value, unsigned int flags, ValueOperation* out) {
  const bool write = is_write(type);
  const unsigned bytes = width(type);
  if (!write && (flags & CU_STREAM_WAIT_VALUE_FLUSH) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  const bool known_flags =
      write ? (flags & ~static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) == 0
            : flags <= CU_STREAM_WAIT_VALUE_NOR;
  if (!known_flags || addr % bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult result = simcuda::check_range(
          addr, bytes, write ? simcuda::Access::kWrite : simcuda::Access::kRead);
      result != CUDA_SUCCESS)
    return result;
  simcuda::Context& context = *stream.context();
  // What a graph node says of it; a write's fields are laid out as a wait's.
  CUstreamBatchMemOpParams params{};
  params.waitValue = {type, addr, {}, flags, 0};
  params.waitValue.value64 = value;  // the low half is `value` for 4 bytes
  *out = {write ? simcuda::value_write_work(context, addr, value, bytes)
                : simcuda::value_wait_work(context, addr, value, bytes, flags),
          {addr, bytes},
          params};
  return CUDA_SUCCESS;
}

// Queues `operations` on `stream` as one piece of work, run in order, each starting on the
// modeled clock where the one before ended. Captured, it is a batch memory operation node, as
// on the driver.
CUresult queue(Stream& stream, std::vector<ValueOperation> operations, const char* what) {
  simcuda::Footprint footprint{what, {}};
  std::vector<simcuda::StreamWork> works;
  auto node = std::make_shared<simcuda::GraphNode>();
  node->type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  node->context = stream.context()->handle();
  for (ValueOperation& operation : operations) {
    footprint.ranges.push_back(operation.range);
    works.push_back(std::move(operation.work));
    node->memory_operations.push_back(operation.params);
  }
  simcuda::StreamWork all = works.size() == 1 ? std::move(works.front())
                                              : [works = std::move(works)] {
                                                  double took = 0.0;
                                                  for (const simcuda::StreamWork& work : works) {
                                                    const double one = work();
                                                    simcuda::running_work_took(one);
                                                    took += one;
                                                  }
                                                  // The stream's worker, or a graph, counts it.
                                                  simcuda::running_work_took(-took);
                                                  return took;
                                                };
  return simcuda::submit_async(stream, std::move(all), nullptr, std::move(footprint),
                               std::move(node));
}

// One write or wait, queued alone: `write` picks which, and the value's size its width.
template <typename Value, bool write>
CUresult one_operation(DefaultStream null_means, CUstream hStream, CUdeviceptr addr, Value value,
                       unsigned int flags) {
  constexpr bool wide = sizeof(Value) == 8;
  constexpr CUstreamBatchMemOpType type =
      write ? (wide ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32)
            : (wide ? CU_STREAM_MEM_OP_WAIT_VALUE_64 : CU_STREAM_MEM_OP_WAIT_VALUE_32);
  Stream* stream = nullptr;
  if (CUresult result = simcuda::resolve_stream(hStream, null_means, &stream);
      result != CUDA_SUCCESS)
    return result;
  ValueOperation operation;
  if (CUresult result = value_operation(*stream, type, addr, value, flags, &operation);
      result != CUDA_SUCCESS)
    return result;
  std::vector<ValueOperation> operations;
  operations.push_back(std::move(operation));
  return queue(*stream, std::move(operations), write ? "stream write value" : "stream wait value");
}

template <typename Value>
CUresult write_value(DefaultStream null_means, CUstream hStream, CUdeviceptr addr, Value value,
                     unsigned int flags) {
  return one_operation<Value, true>(null_means, hStream, addr, value, flags);
}

template <typename Value>
CUresult wait_value(DefaultStream null_means, CUstream hStream, CUdeviceptr addr, Value value,
                    unsigned int flags) {
  return one_operation<Value, false>(null_means, hStream, addr, value, flags);
}

// One entry of a batch; a barrier is nothing more here, where memory is coherent anyway.
CUresult batch_operation(Stream& stream, const CUstreamBatchMemOpParams& params, bool barriers,
                         std::vector<ValueOperation>& operations) {
  ValueOperation operation;
  CUresult result = CUDA_SUCCESS;
  // The tag read as the integer it is: a program's unknown one is no value of cuda.h's enum.
  static_assert(sizeof(CUstreamBatchMemOpType) == sizeof(uint32_t));
  uint32_t tag = 0;
  std::memcpy(&tag, &params, sizeof tag);
  switch (tag) {
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
      // A write's fields begin as a wait's do (their structs' common initial sequence).
      const auto& fields = params.waitValue;
      result = value_operation(stream, params.operation, fields.address,
                               width(params.operation) == 8 ? fields.value64 : fields.value,
                               fields.flags, &operation);
      break;
    }
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      return CUDA_ERROR_NOT_SUPPORTED;
    case CU_STREAM_MEM_OP_BARRIER:
      return barriers ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;  // the 11.7 ABI's alone
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (result == CUDA_SUCCESS) operations.push_back(std::move(operation));
  return result;
}

// `barriers`: the ABI knows CU_STREAM_MEM_OP_BARRIER (11.7 and later).
template <bool barriers>
CUresult batch(DefaultStream null_means, CUstream hStream, unsigned int count,
               CUstreamBatchMemOpParams* paramArray, unsigned int flags) {
  // The driver takes fewer than 256 operations a batch.
  if (count == 0 || count >= 256 || paramArray == nullptr || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = simcuda::resolve_stream(hStream, null_means, &stream);
      result != CUDA_SUCCESS)
    return result;
  std::vector<ValueOperation> operations;
  for (unsigned int index = 0; index < count; ++index) {
    if (CUresult result = batch_operation(*stream, paramArray[index], barriers, operations);
        result != CUDA_SUCCESS)
      return result;
  }
  if (operations.empty()) return CUDA_SUCCESS;  // barriers alone
  return queue(*stream, std::move(operations), "stream batch memory operation");
}

}  // namespace

#define SIMCUDA_VALUE_EXPORTS(name, pt_name, impl, value_type)                                    \
  SIMCUDA_DEFAULT_STREAM_EXPORTS(name, pt_name, impl<value_type>,                                 \
                                 (CUstream stream, CUdeviceptr addr, value_type value,            \
                                  unsigned int flags),                                            \
                                 stream, addr, value, flags)
// Both ABIs of `name`, each with its per-thread form.
#define SIMCUDA_VALUE_FAMILY(name, impl, value_type)                  \
  SIMCUDA_VALUE_EXPORTS(name, name##_ptsz, impl, value_type)          \
  SIMCUDA_VALUE_EXPORTS(name##_v2, name##_v2_ptsz, impl, value_type)
SIMCUDA_VALUE_FAMILY(cuStreamWriteValue32, write_value, cuuint32_t)
SIMCUDA_VALUE_FAMILY(cuStreamWriteValue64, write_value, cuuint64_t)
SIMCUDA_VALUE_FAMILY(cuStreamWaitValue32, wait_value, cuuint32_t)
SIMCUDA_VALUE_FAMILY(cuStreamWaitValue64, wait_value, cuuint64_t)

#define SIMCUDA_BATCH_EXPORTS(name, pt_name, barriers)                                          \
  SIMCUDA_DEFAULT_STREAM_EXPORTS(name, pt_name, batch<barriers>,                                \
                                 (CUstream stream, unsigned int count,                          \
                                  CUstreamBatchMemOpParams * paramArray, unsigned int flags),   \
                                 stream, count, paramArray, flags)
SIMCUDA_BATCH_EXPORTS(cuStreamBatchMemOp, cuStreamBatchMemOp_ptsz, false)
SIMCUDA_BATCH_EXPORTS(cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2_ptsz, true)
