// Replays an allocation trace through the pinned host pool's suballocator and two comparisons,
// measuring allocation + free throughput and fragmentation (peak pool bytes / peak live bytes).
//
//   python3 tools/traces/segment_events.py TRACE.pickle > events.txt   (--level blocks: tensors)
//   build/tests/shim/tiers/vramspill_pool_replay_bench events.txt [--benchmark_* flags]
//
// Allocators (each over memory that is never touched: the traces reach tens of GiB):
//   HostPool/sync/step:S   tiers::HostPool with S-byte steps, idle memory kept up to the shim's
//                          default (1 GiB), every pin on the allocating thread,
//                          4 KiB granularity, over fake pinned regions mmap()ed PROT_NONE (a pool
//                          that touched its memory would crash here)
//   HostPool/ahead/step:S  the same with the background pinning thread (the peak then includes
//                          the room it keeps ahead; what the thread gets done between calls
//                          depends on timing)
//   HostPool/settled/step:S  the same, waiting after each call until the background thread has
//                          nothing left to do (pins ahead, idle release): the same figures on
//                          every run
//   mimalloc               an exclusive mimalloc arena (libmimalloc.so.2 dlopen()ed RTLD_LOCAL,
//                          as the shim would) over one reserved range; pool bytes = the highest
//                          byte it used
//   FirstFit               a plain address-ordered first fit over one range that grows at its
//                          top, 4 KiB granularity, trimmed at the top on free; pool bytes = top
//   GranuleArena           tiers::GranuleArena (tiered mode) over VMM calls that only count
//                          (tests/shim/tiers/fake_granule_ops.h checks the driver's rules, at a
//                          cost quadratic in the mappings: minutes on these traces), every
//                          granule host-located, never trimmed; pool bytes = physical granules
//                          held, live or pooled (2 MiB each)
// Fragmentation = peak pool bytes / peak live bytes, measured on the first replay (a fresh
// allocator); the timed loop then replays the events and frees what is left, again and again,
// on the same allocator. The figures measured on ../shared/traces are in Note [The pool's own
// suballocator] and Note [Regions of their own for large blocks] (shim/tiers/host_pool.h).
// Synthetic traces with several streams, large segments and empty_cache() bursts:
// tools/traces/synthetic_events.py. HostPool rows also report from the first replay the pins an
// allocation waited for, and the GiB pinned on the replaying thread and in all.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <mimalloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/host_budget.h"
#include "tiers/granule_arena.h"
#include "tiers/host_pool.h"

namespace {

using vramspill::core::HostBudget;
using vramspill::tiers::ArenaOptions;
using vramspill::tiers::CopyLane;
using vramspill::tiers::GranuleArena;
using vramspill::tiers::GranuleHandle;
using vramspill::tiers::GranuleKind;
using vramspill::tiers::GranuleOps;
using vramspill::tiers::kGranuleBytes;
using vramspill::tiers::Mapping;
using vramspill::tiers::HostPool;
using vramspill::tiers::HostPoolOptions;
using vramspill::tiers::PinnedMemoryOps;

constexpr uint64_t kGranularity = 4096;
constexpr uint64_t kMiB = uint64_t{1} << 20;
// Idle pinned memory the pool keeps: the shim's default (`spill.host_pool_keep`). The timed loop
// then also unpins and pins again (munmap and mmap here) what a replay leaves idle beyond it.
constexpr uint64_t kKeep = uint64_t{1} << 30;

struct Event {
  bool allocate = false;
  uint32_t id = 0;
  uint64_t bytes = 0;
};

struct Trace {
  std::vector<Event> events;
  std::vector<uint64_t> bytes_of;  // by id
  uint32_t ids = 0;
  uint64_t peak_live = 0;
};

bool load(const std::string& path, Trace& trace) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  std::vector<uint64_t> sizes;
  uint64_t live = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    char kind = 0;
    Event event;
    fields >> kind >> event.id;
    event.allocate = kind == 'a';
    if (event.allocate) fields >> event.bytes;
    if (!fields || (kind != 'a' && kind != 'f')) {
      std::fprintf(stderr, "%s: bad line: %s\n", path.c_str(), line.c_str());
      return false;
    }
    if (event.id >= sizes.size()) sizes.resize(event.id + 1, 0);
    if (event.allocate) {
      sizes[event.id] = event.bytes;
      live += event.bytes;
    } else {
      live -= sizes[event.id];
      event.bytes = sizes[event.id];
    }
    trace.peak_live = std::max(trace.peak_live, live);
    trace.events.push_back(event);
  }
  trace.ids = static_cast<uint32_t>(sizes.size());
  trace.bytes_of = std::move(sizes);
  return true;
}

// --- The allocators under test -------------------------------------------------------------------

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(uint64_t bytes) = 0;
  virtual void free(void* block, uint64_t bytes) = 0;
  virtual uint64_t peak_pool_bytes() const = 0;
  // Further figures to report, name -> value.
  virtual std::map<std::string, double> counters() const { return {}; }
};

// Fake pinned memory: address space only (PROT_NONE, MAP_NORESERVE), so nothing is committed.
// Counts the bytes pinned, and those pinned on the thread that replays the trace: what pinning
// would cost a real program (about 0.35 s per GiB), and how much of it the program waits for.
struct PinCounts {
  std::thread::id replaying_thread = std::this_thread::get_id();
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> bytes_on_path{0};
};

bool reserve_pin(void* context, std::size_t bytes, void** base) {
  void* memory =
      mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return false;
  *base = memory;
  auto& counts = *static_cast<PinCounts*>(context);
  counts.bytes += bytes;
  if (std::this_thread::get_id() == counts.replaying_thread) counts.bytes_on_path += bytes;
  return true;
}
bool reserve_unpin(void*, void* base, std::size_t bytes) { return munmap(base, bytes) == 0; }

// How the pool pins: every pin on the allocating thread (kSync); with its background thread
// (kAhead); or with it, waiting after each call until it has nothing left to do (kSettled: a
// program that computes long enough between allocations, the same figures on every run).
enum class Pinning { kSync, kAhead, kSettled };

class HostPoolAllocator final : public Allocator {
 public:
  HostPoolAllocator(Pinning pinning, uint64_t step_bytes)
      : settled_(pinning == Pinning::kSettled),
        pool_(options(pinning, step_bytes), ops(), budget_) {}
  void* allocate(uint64_t bytes) override {
    void* block = pool_.allocate(bytes);
    if (settled_) pool_.wait_for_background_work();
    return block;
  }
  void free(void* block, uint64_t) override {
    pool_.free(block);
    if (settled_) pool_.wait_for_background_work();
  }
  uint64_t peak_pool_bytes() const override { return pool_.stats().peak_pinned_bytes; }
  std::map<std::string, double> counters() const override {
    const auto stats = pool_.stats();
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    return {{"pins_on_path", static_cast<double>(stats.pins_on_allocation_path)},
            {"pinned_GiB", static_cast<double>(pins_.bytes) / kGiB},
            {"pinned_GiB_on_path", static_cast<double>(pins_.bytes_on_path) / kGiB}};
  }

 private:
  static HostPoolOptions options(Pinning pinning, uint64_t step_bytes) {
    HostPoolOptions options;
    options.grow_in_background = pinning != Pinning::kSync;
    options.step_bytes = step_bytes;
    options.release_idle_above = kKeep;
    return options;
  }
  PinnedMemoryOps ops() { return {&pins_, &reserve_pin, &reserve_unpin}; }

  bool settled_;
  PinCounts pins_;
  HostBudget budget_;
  HostPool pool_;
};

// mimalloc's entry points, through a handle that keeps it out of the global scope
// (shim/README.md, "What a preloaded library may link"): linking libmimalloc would replace malloc
// for the whole benchmark, HostPool's index included.
struct Mimalloc {
  decltype(&mi_manage_os_memory_ex) manage_os_memory_ex = nullptr;
  decltype(&mi_heap_new_in_arena) heap_new_in_arena = nullptr;
  decltype(&mi_heap_malloc_aligned) heap_malloc_aligned = nullptr;
  decltype(&mi_usable_size) usable_size = nullptr;
  decltype(&mi_free) free = nullptr;

  static const Mimalloc* get() {
    static const Mimalloc* loaded = [] () -> const Mimalloc* {
      void* library = dlopen(VRAMSPILL_MIMALLOC_SONAME, RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) return nullptr;
      auto* mi = new Mimalloc;
      mi->manage_os_memory_ex = reinterpret_cast<decltype(manage_os_memory_ex)>(
          dlsym(library, "mi_manage_os_memory_ex"));
      mi->heap_new_in_arena =
          reinterpret_cast<decltype(heap_new_in_arena)>(dlsym(library, "mi_heap_new_in_arena"));
      mi->heap_malloc_aligned = reinterpret_cast<decltype(heap_malloc_aligned)>(
          dlsym(library, "mi_heap_malloc_aligned"));
      mi->usable_size = reinterpret_cast<decltype(usable_size)>(dlsym(library, "mi_usable_size"));
      mi->free = reinterpret_cast<decltype(free)>(dlsym(library, "mi_free"));
      if (!mi->manage_os_memory_ex || !mi->heap_new_in_arena || !mi->heap_malloc_aligned ||
          !mi->usable_size || !mi->free) {
        return nullptr;
      }
      return mi;
    }();
    return loaded;
  }
};

// One exclusive arena per process (2.0.9 cannot give an arena back), 32 MiB-aligned (its segment
// size: anything else crashes it), committed and "large" so that it never decommits.
class MimallocAllocator final : public Allocator {
 public:
  static std::unique_ptr<MimallocAllocator> create(uint64_t arena_bytes, std::string& error) {
    const Mimalloc* mi = Mimalloc::get();
    if (mi == nullptr) {
      error = "cannot load " VRAMSPILL_MIMALLOC_SONAME;
      return nullptr;
    }
    constexpr uint64_t kAlign = uint64_t{32} << 20;
    arena_bytes = (arena_bytes + kAlign - 1) & ~(kAlign - 1);
    // Readable and writable (mimalloc writes segment headers into the arena) but NORESERVE:
    // only the pages it touches are ever committed.
    void* raw = mmap(nullptr, arena_bytes + kAlign, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
      error = "cannot reserve the arena";
      return nullptr;
    }
    const uint64_t base = (reinterpret_cast<uint64_t>(raw) + kAlign - 1) & ~(kAlign - 1);
    mi_arena_id_t arena = 0;
    if (!mi->manage_os_memory_ex(reinterpret_cast<void*>(base), arena_bytes, true, true, true, -1,
                                 true, &arena)) {
      error = "mi_manage_os_memory_ex failed";
      return nullptr;
    }
    mi_heap_t* heap = mi->heap_new_in_arena(arena);
    if (heap == nullptr) {
      error = "mi_heap_new_in_arena failed";
      return nullptr;
    }
    return std::unique_ptr<MimallocAllocator>(new MimallocAllocator(mi, heap, base));
  }

  void* allocate(uint64_t bytes) override {
    void* block = mi_->heap_malloc_aligned(heap_, bytes, 256);
    if (block != nullptr) {
      const uint64_t end = reinterpret_cast<uint64_t>(block) + mi_->usable_size(block) - base_;
      peak_end_ = std::max(peak_end_, end);
    }
    return block;
  }
  void free(void* block, uint64_t) override { mi_->free(block); }
  uint64_t peak_pool_bytes() const override { return peak_end_; }

 private:
  MimallocAllocator(const Mimalloc* mi, mi_heap_t* heap, uint64_t base)
      : mi_(mi), heap_(heap), base_(base) {}

  const Mimalloc* mi_;
  mi_heap_t* heap_;
  uint64_t base_;
  uint64_t peak_end_ = 0;
};

// Address-ordered first fit over one range that grows at its top and is trimmed when the
// topmost block is freed (what a plain sbrk-style allocator does). Only integers: no memory.
class FirstFitAllocator final : public Allocator {
 public:
  void* allocate(uint64_t bytes) override {
    bytes = round(bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const uint64_t start = it->first;
      const uint64_t rest = it->second - bytes;
      free_.erase(it);
      if (rest > 0) free_.emplace(start + bytes, rest);
      return to_pointer(start);
    }
    // Nothing fits: grow the top, starting inside a free range that ends there, if any.
    uint64_t start = top_;
    if (!free_.empty()) {
      const auto last = std::prev(free_.end());
      if (last->first + last->second == top_) {
        start = last->first;
        free_.erase(last);
      }
    }
    top_ = start + bytes;
    peak_top_ = std::max(peak_top_, top_);
    return to_pointer(start);
  }

  void free(void* block, uint64_t bytes) override {
    uint64_t start = reinterpret_cast<uint64_t>(block) - kBase;
    bytes = round(bytes);
    auto next = free_.find(start + bytes);
    if (next != free_.end()) {
      bytes += next->second;
      free_.erase(next);
    }
    auto previous = free_.lower_bound(start);
    if (previous != free_.begin()) {
      --previous;
      if (previous->first + previous->second == start) {
        start = previous->first;
        bytes += previous->second;
        free_.erase(previous);
      }
    }
    if (start + bytes == top_) {
      top_ = start;  // trim
    } else {
      free_.emplace(start, bytes);
    }
  }

  uint64_t peak_pool_bytes() const override { return peak_top_; }

 private:
  static constexpr uint64_t kBase = uint64_t{1} << 40;  // so no block is at address 0
  static uint64_t round(uint64_t bytes) { return (bytes + kGranularity - 1) & ~(kGranularity - 1); }
  static void* to_pointer(uint64_t offset) { return reinterpret_cast<void*>(kBase + offset); }

  std::map<uint64_t, uint64_t> free_;
  uint64_t top_ = 0;
  uint64_t peak_top_ = 0;
};

// VMM calls that succeed and count physical granules, and nothing else: nothing is reserved or
// mapped for real.
class CountingGranuleOps final : public GranuleOps {
 public:
  uint64_t live_granules() const { return live_granules_; }

  CUresult reserve(uint64_t bytes, CUdeviceptr* base) noexcept override {
    *base = next_address_;
    next_address_ += bytes;
    return CUDA_SUCCESS;
  }
  CUresult unreserve(CUdeviceptr, uint64_t) noexcept override { return CUDA_SUCCESS; }
  CUresult create(GranuleKind, uint64_t granules, GranuleHandle* handle) noexcept override {
    *handle = ++next_handle_;
    granules_[*handle] = granules;
    live_granules_ += granules;
    return CUDA_SUCCESS;
  }
  CUresult release(GranuleHandle handle) noexcept override {
    live_granules_ -= granules_.at(handle);
    granules_.erase(handle);
    return CUDA_SUCCESS;
  }
  CUresult map(CUdeviceptr, std::span<const Mapping>) noexcept override {
    return CUDA_SUCCESS;
  }
  CUresult unmap(CUdeviceptr, uint64_t) noexcept override { return CUDA_SUCCESS; }
  uint64_t vmm_calls() const noexcept override { return 0; }
  CUresult synchronize_device() noexcept override { return CUDA_SUCCESS; }
  CUresult wait_for_stream_ends(
      std::span<const vramspill::StreamEnd>) noexcept override {
    return CUDA_SUCCESS;
  }
  CUresult begin_copies() noexcept override { return CUDA_SUCCESS; }
  CUresult mark_copies(CopyLane, uint64_t* event) noexcept override {
    *event = 1;
    return CUDA_SUCCESS;
  }
  CUresult follow_mark(CopyLane, uint64_t) noexcept override { return CUDA_SUCCESS; }
  CUresult copy(CUdeviceptr, CUdeviceptr, uint64_t, CopyLane) noexcept override {
    return CUDA_SUCCESS;
  }
  CUresult wait_for_copies() noexcept override { return CUDA_SUCCESS; }
  CUresult queue_copies_after(std::span<const uint64_t>) noexcept override {
    return CUDA_SUCCESS;
  }
  CUresult record_copies(uint64_t* event) noexcept override {
    *event = 1;
    return CUDA_SUCCESS;
  }
  bool copies_done(uint64_t) noexcept override { return true; }
  void drop_event(uint64_t) noexcept override {}
  CUresult order_stream_after(uint64_t, uint64_t, bool) noexcept override { return CUDA_SUCCESS; }
  void forget_context() noexcept override {}

 private:
  CUdeviceptr next_address_ = uint64_t{1} << 40;
  GranuleHandle next_handle_ = 0;
  uint64_t live_granules_ = 0;
  std::map<GranuleHandle, uint64_t> granules_;  // by handle
};

// Pool bytes: the physical granules the arena holds (live blocks' and pooled ones), at their
// peak.
class GranuleArenaAllocator final : public Allocator {
 public:
  void* allocate(uint64_t bytes) override {
    CUdeviceptr base = 0;
    if (arena_.allocate(bytes, /*device_granules=*/0, &base) != CUDA_SUCCESS) return nullptr;
    peak_granules_ = std::max(peak_granules_, ops_.live_granules());
    return reinterpret_cast<void*>(base);
  }
  void free(void* block, uint64_t) override {
    arena_.free(reinterpret_cast<CUdeviceptr>(block));
  }
  uint64_t peak_pool_bytes() const override { return peak_granules_ * kGranuleBytes; }

 private:
  CountingGranuleOps ops_;
  GranuleArena arena_{ops_, ArenaOptions{}};
  uint64_t peak_granules_ = 0;
};

// --- Replay --------------------------------------------------------------------------------------

// One pass over the events, then frees what is still live; false if an allocation failed.
bool replay(const Trace& trace, Allocator& allocator, std::vector<void*>& blocks,
            uint64_t& operations) {
  for (const Event& event : trace.events) {
    if (event.allocate) {
      void* block = allocator.allocate(event.bytes);
      if (block == nullptr) return false;
      blocks[event.id] = block;
    } else {
      allocator.free(blocks[event.id], event.bytes);
      blocks[event.id] = nullptr;
    }
    ++operations;
  }
  for (uint32_t id = 0; id < trace.ids; ++id) {
    if (blocks[id] == nullptr) continue;
    allocator.free(blocks[id], trace.bytes_of[id]);
    blocks[id] = nullptr;
    ++operations;
  }
  return true;
}

// An allocator and its peak pool bytes from a first replay on it, fresh. Made once per name and
// kept: the benchmark library calls a benchmark several times, and mimalloc cannot give an
// arena back.
struct Measured {
  std::unique_ptr<Allocator> allocator;
  uint64_t peak_pool = 0;
  std::map<std::string, double> counters;
  std::string error;
};

void run(benchmark::State& state, const Trace& trace, Measured& measured,
         const std::function<std::unique_ptr<Allocator>(std::string&)>& make) {
  std::vector<void*> blocks(trace.ids, nullptr);
  uint64_t operations = 0;
  if (!measured.allocator && measured.error.empty()) {
    measured.allocator = make(measured.error);
    if (measured.allocator && !replay(trace, *measured.allocator, blocks, operations)) {
      measured.error = "an allocation failed";
    }
    if (measured.allocator) {
      measured.peak_pool = measured.allocator->peak_pool_bytes();
      measured.counters = measured.allocator->counters();
    }
  }
  if (!measured.error.empty()) {
    state.SkipWithError(measured.error.c_str());
    return;
  }
  Allocator* allocator = measured.allocator.get();
  const uint64_t peak_pool = measured.peak_pool;
  operations = 0;
  for (auto _ : state) {
    if (!replay(trace, *allocator, blocks, operations)) {
      state.SkipWithError("an allocation failed");
      return;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(operations));
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  state.counters["fragmentation"] =
      static_cast<double>(peak_pool) / static_cast<double>(std::max<uint64_t>(trace.peak_live, 1));
  state.counters["peak_pool_GiB"] = static_cast<double>(peak_pool) / kGiB;
  state.counters["peak_live_GiB"] = static_cast<double>(trace.peak_live) / kGiB;
  for (const auto& [name, value] : measured.counters) state.counters[name] = value;
}

}  // namespace

// --max-fragmentation=NAME=LIMIT: a limit on an allocator's fragmentation (tests).
struct Limit {
  std::string name;
  double most = 0;
};

bool parse_limit(const std::string& argument, std::vector<Limit>& limits) {
  static const std::string kFlag = "--max-fragmentation=";
  if (argument.rfind(kFlag, 0) != 0) return false;
  const std::string value = argument.substr(kFlag.size());
  const std::size_t equals = value.rfind('=');
  if (equals == std::string::npos || equals == 0) return false;
  try {
    std::size_t used = 0;
    const double most = std::stod(value.substr(equals + 1), &used);
    if (used != value.size() - equals - 1) return false;
    limits.push_back({value.substr(0, equals), most});
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<Limit> limits;
  bool usage_error = argc < 2;
  for (int i = 2; i < argc && !usage_error; ++i) usage_error = !parse_limit(argv[i], limits);
  if (usage_error) {
    std::fprintf(stderr,
                 "usage: %s EVENTS.txt [--max-fragmentation=NAME=LIMIT]... [--benchmark_* flags]\n"
                 "EVENTS.txt: from tools/traces/segment_events.py TRACE.pickle\n"
                 "--max-fragmentation: exit 1 if allocator NAME (which must run) exceeds LIMIT\n",
                 argv[0]);
    return 2;
  }
  static Trace trace;
  if (!load(argv[1], trace)) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  std::fprintf(stderr, "%s: %zu events, %u blocks, peak live %.2f GiB\n", argv[1],
               trace.events.size(), trace.ids,
               static_cast<double>(trace.peak_live) / (1024.0 * 1024.0 * 1024.0));

  using Make = std::function<std::unique_ptr<Allocator>(std::string&)>;
  static const std::pair<const char*, Make> allocators[] = {
      {"HostPool/sync/step:256MiB",
       [](std::string&) {
         return std::make_unique<HostPoolAllocator>(Pinning::kSync, 256 * kMiB);
       }},
      {"HostPool/ahead/step:256MiB",
       [](std::string&) {
         return std::make_unique<HostPoolAllocator>(Pinning::kAhead, 256 * kMiB);
       }},
      {"HostPool/settled/step:256MiB",
       [](std::string&) {
         return std::make_unique<HostPoolAllocator>(Pinning::kSettled, 256 * kMiB);
       }},
      {"HostPool/sync/step:1GiB",
       [](std::string&) {
         return std::make_unique<HostPoolAllocator>(Pinning::kSync, 1024 * kMiB);
       }},
      {"HostPool/ahead/step:1GiB",
       [](std::string&) {
         return std::make_unique<HostPoolAllocator>(Pinning::kAhead, 1024 * kMiB);
       }},
      {"HostPool/settled/step:1GiB",
       [](std::string&) {
         return std::make_unique<HostPoolAllocator>(Pinning::kSettled, 1024 * kMiB);
       }},
      {"mimalloc",
       [](std::string& error) -> std::unique_ptr<Allocator> {
         return MimallocAllocator::create(2 * trace.peak_live + (uint64_t{4} << 30), error);
       }},
      {"FirstFit", [](std::string&) { return std::make_unique<FirstFitAllocator>(); }},
      {"GranuleArena", [](std::string&) { return std::make_unique<GranuleArenaAllocator>(); }},
  };
  static Measured measured[std::size(allocators)];
  for (std::size_t i = 0; i < std::size(allocators); ++i) {
    benchmark::RegisterBenchmark(allocators[i].first, [i, make = allocators[i].second](
                                                          benchmark::State& state) {
      run(state, trace, measured[i], make);
    })->Unit(benchmark::kMicrosecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  int status = 0;
  for (const Limit& limit : limits) {
    const auto* named = std::find_if(std::begin(allocators), std::end(allocators),
                                     [&](const auto& entry) { return limit.name == entry.first; });
    const Measured* result =
        named == std::end(allocators) ? nullptr : &measured[named - std::begin(allocators)];
    if (result == nullptr || !result->allocator) {
      std::fprintf(stderr, "--max-fragmentation: %s did not run\n", limit.name.c_str());
      status = 1;
      continue;
    }
    const double fragmentation = static_cast<double>(result->peak_pool) /
                                 static_cast<double>(std::max<uint64_t>(trace.peak_live, 1));
    std::fprintf(stderr, "%s: fragmentation %.4f, limit %.4f: %s\n", limit.name.c_str(),
                 fragmentation, limit.most, fragmentation <= limit.most ? "ok" : "TOO HIGH");
    if (fragmentation > limit.most) status = 1;
  }
  return status;
}
