// A shared library that allocates device memory for its caller, as NCCL or a framework's
// allocator does: [[tiered.rule]] library patterns are matched against it (rules_job.py).
#include <cuda.h>

#include <cstddef>

extern "C" __attribute__((visibility("default"))) __attribute__((noinline)) CUresult
rule_allocator_alloc(CUdeviceptr* block, std::size_t bytes) {
  const CUresult result = cuMemAlloc(block, bytes);
  asm volatile("");  // not a tail call: this library's frame stays on the stack
  return result;
}
