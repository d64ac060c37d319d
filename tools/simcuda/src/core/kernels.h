// The kernels simcuda can run: a fixed table of host implementations of the project's real CUDA
// kernels (tools/simcuda/kernels/vs_kernels.cu), with the same names and parameters, so one
// driver-API program runs unchanged on a GPU and on simcuda. simcuda has no ISA: every module
// image loads, and its functions resolve by name from this table.
//
// Note [Kernel parameters]
// A launch passes parameters either as an array of pointers to each argument (kernelParams) or
// as one packed buffer (extra: CU_LAUNCH_PARAM_BUFFER_POINTER). The packed layout is the CUDA
// ABI's: each parameter at the next offset aligned to its alignment, which for a scalar or a
// pointer is its size and for a struct that of its most aligned member (vs_touch's 3 848-byte
// list is aligned to 8). cuFuncGetParamInfo answers a parameter's offset and size, the struct's
// whole size for a struct, as the driver does. simcuda copies the arguments into
// that layout at launch time (a program may reuse its argument storage as soon as the launch
// returns, as on a GPU), and both the host implementation and the cost model read them from it.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "core/traffic.h"

namespace simcuda {

struct KernelParam {
  const char* name;
  uint32_t size;
  uint32_t alignment;  // a power of two that divides the size (Note [Kernel parameters])
};

// The arguments of one launch, packed at the ABI offsets (Note [Kernel parameters]).
class KernelArgs {
 public:
  KernelArgs() = default;
  explicit KernelArgs(std::vector<std::byte> packed) : packed_(std::move(packed)) {}

  std::span<const std::byte> bytes() const { return packed_; }
  // The argument at byte `offset` as a T. The launch checked that the buffer holds every
  // parameter, so reads stay inside it.
  template <typename T>
  T at(size_t offset) const {
    T value{};
    std::memcpy(&value, packed_.data() + offset, sizeof(T));
    return value;
  }

 private:
  std::vector<std::byte> packed_;
};

// One range of memory a kernel reads or writes, in device (program-visible) addresses.
struct MemoryRange {
  uint64_t address = 0;
  uint64_t size = 0;
  Access access = Access::kRead;
};

struct KernelDef {
  const char* name;
  std::span<const KernelParam> params;
  // Runs the kernel on the host. Memory must be reached through device_view() (Note [Two views
  // of device memory] in address_space.h). It may fault (simcuda turns that into
  // CUDA_ERROR_ILLEGAL_ADDRESS, see kernel_fault.h), so it must hold no locks and own no objects
  // with destructors: a fault leaves it by siglongjmp. Returns CUDA_SUCCESS or the error the GPU
  // would raise (CUDA_ERROR_MISALIGNED_ADDRESS).
  CUresult (*run)(const KernelArgs& args);
  // The memory the kernel touches with these arguments, for the cost model and the peer-access
  // check (Note [Peer access] in peer_access.h).
  std::vector<MemoryRange> (*touches)(const KernelArgs& args);
};

std::span<const KernelDef> kernel_table();
const KernelDef* find_kernel(std::string_view name);  // nullptr when not in the table

// Byte offset of parameter `index` of `kernel` (each aligned to its alignment).
size_t param_offset(const KernelDef& kernel, size_t index);
// Bytes of the packed parameter buffer: the end of the last parameter.
size_t param_buffer_size(const KernelDef& kernel);

}  // namespace simcuda
