// The smallest real CUDA runtime program: one cudaMalloc. Built with nvcc against the static
// cudart and not against libcuda, so the runtime finds the driver the way every CUDA program
// does (dlopen("libcuda.so.1")) and performs its full entry-point lookup sequence.
//
// On simcuda, cudart stops at its export-table integrity check (simcuda implements no export
// tables) and cudaMalloc fails; that is expected. The program reports the result and exits 0
// either way: what is under test is the lookups, recorded by SIMCUDA_LOOKUP_LOG.

#include <cuda_runtime.h>

#include <cstdio>

int main() {
  void* memory = nullptr;
  const cudaError_t result = cudaMalloc(&memory, size_t{1} << 20);
  std::printf("cudaMalloc(1 MiB): %s\n", cudaGetErrorName(result));
  if (result == cudaSuccess) cudaFree(memory);
  return 0;
}
