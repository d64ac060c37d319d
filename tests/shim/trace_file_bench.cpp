// What the [trace] file adds to each memory event (telemetry/trace_file.h): formatting the line,
// the lock and the copy into the buffer, and its share of the block writes. Every allocation,
// free and tiered launch of a traced job pays it, on top of the ledger (ledger_bench.cpp).
// Run: vramspill_trace_file_bench [--benchmark_repetitions=N]; "Time" is per event per thread.
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <string>

#include "telemetry/trace_file.h"

namespace vramspill::telemetry {
namespace {

// One trace shared by all threads of a run, as the hooks of one process share theirs; written
// to a file under /tmp that is removed at once (the descriptor keeps it).
TraceFile& shared_trace() {
  static TraceFile* const trace = [] {
    auto* created = new TraceFile;
    char path[] = "/tmp/vramspill-trace-bench-XXXXXX";
    const int fd = mkstemp(path);
    unlink(path);
    std::string problem;
    if (fd < 0 || !created->adopt(fd, path, problem)) std::abort();
    return created;
  }();
  return *trace;
}

void allocation_and_free(benchmark::State& state) {
  TraceFile& trace = shared_trace();
  const core::Allocation allocation{
      .key = 0x7f3a00000000, .bytes = 2 << 20, .device = 0, .route = core::Route::kMemAlloc};
  for (auto _ : state) {
    trace.allocated(allocation);
    trace.freed(allocation);
  }
  state.SetItemsProcessed(2 * state.iterations());
}
BENCHMARK(allocation_and_free)->Threads(1)->Threads(4);

void launch_of_8_blocks(benchmark::State& state) {
  TraceFile& trace = shared_trace();
  std::array<uint64_t, 8> blocks{};
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = 0x7f3a00000000 + i * (8 << 20);
  for (auto _ : state) trace.used(0, 7, blocks);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(launch_of_8_blocks)->Threads(1)->Threads(4);

}  // namespace
}  // namespace vramspill::telemetry
