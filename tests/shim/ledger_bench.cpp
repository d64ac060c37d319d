// The ledger's part of one device allocation and its free (admit + on_allocated + on_freed),
// the cost every hooked cuMemAlloc/cuMemFree pair pays on top of the driver (shim/README.md,
// "Costs").
// Also what one submission pays for the remap window (Note [Remap window]) while no mover
// closes it: every launch, copy and memset will pay it in tiered mode.
// Run: vramspill_ledger_bench [--benchmark_repetitions=N]; "Time" is per pair (or submission)
// per thread.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>

#include "core/ledger.h"
#include "core/remap_window.h"

namespace vramspill::core {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kBytes = uint64_t{2} << 20;  // PyTorch's small-segment size

// All threads of a run share one ledger and one device, as the hooks of one process do.
Ledger& shared_ledger() {
  static Ledger* const ledger = [] {
    auto* created = new Ledger;
    created->set_device(0, 80 * kGiB, 80 * kGiB);
    return created;
  }();
  return *ledger;
}

// A ledger that already holds 100 000 live allocations on device 0 (a large model's tensors
// under a framework without a caching allocator), so the pair probes a loaded table.
Ledger& loaded_ledger() {
  static Ledger* const ledger = [] {
    auto* created = new Ledger;
    created->set_device(0, 80 * kGiB, 80 * kGiB);
    for (uint64_t i = 1; i <= 100000; ++i) {
      const Admission admission = created->admit(0, Route::kMemAlloc, 4096);
      created->on_allocated(admission, (uint64_t{1} << 46) + i * 4096, 4096);
    }
    return created;
  }();
  return *ledger;
}

void run_pairs(benchmark::State& state, Ledger& ledger) {
  // Distinct keys per thread, 2 MiB apart like real segments, cycling through a small window.
  const uint64_t base = (static_cast<uint64_t>(state.thread_index()) + 1) << 40;
  uint64_t i = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the library idiom
    const uint64_t key = base + (i++ % 1024) * kBytes;
    const Admission admission = ledger.admit(0, Route::kMemAlloc, kBytes);
    ledger.on_allocated(admission, key, kBytes);
    benchmark::DoNotOptimize(ledger.on_freed(key));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_AllocFreePair(benchmark::State& state) { run_pairs(state, shared_ledger()); }
BENCHMARK(BM_AllocFreePair)->Threads(1)->Threads(4);

void BM_AllocFreePairLoadedTable(benchmark::State& state) { run_pairs(state, loaded_ledger()); }
BENCHMARK(BM_AllocFreePairLoadedTable)->Threads(1)->Threads(4);

// All threads enter and leave one window, as every submission hook of a process does.
void BM_SubmissionThroughTheRemapWindow(benchmark::State& state) {
  static RemapWindow window;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the library idiom
    const RemapWindow::Submission submission = window.enter();
    benchmark::DoNotOptimize(&submission);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SubmissionThroughTheRemapWindow)->Threads(1)->Threads(4);

}  // namespace
}  // namespace vramspill::core
