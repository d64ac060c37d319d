// What the [trace] file adds to each memory event (telemetry/trace_file.h): encoding the event,
// the lock and the copy into the buffer, and its share of the block writes, in each format
// ([trace] format: text or binary). Every allocation, free and tiered launch of a traced job pays
// it, on top of the ledger (ledger_bench.cpp).
// Run: vramspill_trace_file_bench [--benchmark_repetitions=N]. "Time" is per iteration per
// thread (allocation_and_free's is two events); items_per_second counts events. Single-threaded
// runs also count the file's bytes per event (bytes_per_event). The figures of both formats are
// in Note [Binary trace records] (telemetry/trace_binary_format.h).
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <string>

#include "telemetry/trace_file.h"

namespace vramspill::telemetry {
namespace {

// One trace of `format` shared by all threads of a run, as the hooks of one process share
// theirs; written to a file under /tmp that is removed at once (the descriptor keeps it).
struct SharedTrace {
  TraceFile trace;
  int watched = -1;  // the same file, for its size
};

SharedTrace& shared_trace(TraceFormat format) {
  const auto make = [](TraceFormat made_format) {
    auto* created = new SharedTrace;
    char path[] = "/tmp/vramspill-trace-bench-XXXXXX";
    const int fd = mkstemp(path);
    unlink(path);
    created->watched = fd < 0 ? -1 : dup(fd);
    std::string problem;
    if (fd < 0 || !created->trace.adopt(fd, path, made_format, problem)) std::abort();
    return created;
  };
  static SharedTrace* const text = make(TraceFormat::kText);
  static SharedTrace* const binary = make(TraceFormat::kBinary);
  return format == TraceFormat::kBinary ? *binary : *text;
}

int64_t file_size(const SharedTrace& shared) {
  struct stat facts {};
  return fstat(shared.watched, &facts) == 0 ? facts.st_size : 0;
}

// Runs `event` (one or more events, `events_each` of them) as the benchmark's loop; with one
// thread, also counts what they add to the file.
template <class Event>
void run(benchmark::State& state, TraceFormat format, int64_t events_each, Event event) {
  SharedTrace& shared = shared_trace(format);
  const bool counting = state.threads() == 1;
  if (counting) shared.trace.flush();
  const int64_t before = counting ? file_size(shared) : 0;
  for (auto _ : state) event(shared.trace);
  const int64_t events = events_each * static_cast<int64_t>(state.iterations());
  state.SetItemsProcessed(events);
  if (counting && events > 0) {
    shared.trace.flush();
    state.counters["bytes_per_event"] =
        static_cast<double>(file_size(shared) - before) / static_cast<double>(events);
  }
}

void allocation_and_free(benchmark::State& state, TraceFormat format) {
  const core::Allocation allocation{
      .key = 0x7f3a00000000, .bytes = 2 << 20, .device = 0, .route = core::Route::kMemAlloc};
  run(state, format, 2, [&](TraceFile& trace) {
    trace.allocated(allocation);
    trace.freed(allocation);
  });
}
BENCHMARK_CAPTURE(allocation_and_free, text, TraceFormat::kText)->Threads(1)->Threads(4);
BENCHMARK_CAPTURE(allocation_and_free, binary, TraceFormat::kBinary)->Threads(1)->Threads(4);

void launch_of_8_blocks(benchmark::State& state, TraceFormat format) {
  std::array<uint64_t, 8> blocks{};
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = 0x7f3a00000000 + i * (8 << 20);
  run(state, format, 1, [&](TraceFile& trace) { trace.used(0, 7, blocks); });
}
BENCHMARK_CAPTURE(launch_of_8_blocks, text, TraceFormat::kText)->Threads(1)->Threads(4);
BENCHMARK_CAPTURE(launch_of_8_blocks, binary, TraceFormat::kBinary)->Threads(1)->Threads(4);

}  // namespace
}  // namespace vramspill::telemetry
