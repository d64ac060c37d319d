// What an NVTX event of the shim costs with no tool attached (shim/telemetry/nvtx.h, Note [NVTX
// without a tool] in nvtx.cpp): a remap window's range and marks, and a spill's mark, with
// NVTX_INJECTION64_PATH unset, so that NVTX finds no tool on the first call and every later one
// is a test of the domain handle. Not a test: run build/tests/shim/nvtx/vramspill_nvtx_bench by
// hand (ctest runs it briefly, unset, as nvtx_bench_smoke).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "telemetry/nvtx.h"

namespace {

constexpr uint64_t kTwoGranules = uint64_t{4} << 20;

void BM_RemapWindowEventsWithoutTool(benchmark::State& state) {
  for (auto _ : state) {
    const vramspill::nvtx::RemapWindowRange range;
    vramspill::nvtx::evicted(2, kTwoGranules);
    vramspill::nvtx::promoted(2, kTwoGranules);
  }
}
BENCHMARK(BM_RemapWindowEventsWithoutTool);

void BM_SpillMarkWithoutTool(benchmark::State& state) {
  for (auto _ : state) vramspill::nvtx::spilled(kTwoGranules, 0, "the pinned host pool");
}
BENCHMARK(BM_SpillMarkWithoutTool);

}  // namespace
