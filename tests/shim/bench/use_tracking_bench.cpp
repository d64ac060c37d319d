// What use tracking adds to a kernel launch when something is tracked: the hook's whole extra work
// on cuLaunchKernel with 8 parameters (hooks/use_tracking.cpp's record_kernel): the layout from
// the cache (Note [The parameter layout cache]), the 8 parameters' words, their lookup among the
// tracked ranges and the touched blocks' stamps (core/use_tracker.h). With nothing tracked the
// hook does none of it (one more load: vramspill_hook_bench's LaunchRejected measures that path).
//
// - TrackedLaunch/ranges:N/hits:H: N ranges of 2 MiB tracked, H of the 8 words inside one (the
//   others: integers, a float's bits, a size, a pointer outside every range, a null pointer).
//   ReadWords and RecordWords are its two halves. The kernel is a CUkernel, as the CUDA runtime
//   launches (Note [Kernels launched as functions]): its layout came from the kernel query, and
//   is cached like a function's.
// - TrackedLaunchStruct/ranges:N/hits:H: a launch as PyTorch's multi-tensor kernels make them:
//   one 4 KiB struct of 256 pointers, H of them into tracked blocks, and two bare pointers. All
//   256 fit a launch's list (SubmissionUse::kCapacity).
// - TrackedLaunchThreads: the same from 2 threads on different blocks: the shared sequence
//   counter and the reader slots under contention (Note [Sequence numbers and last uses]).
// - MarkStreams/ranges:N/hits:H: what [tiered] window = "tracked" adds per launch: the stream
//   marked on the H blocks touched (Note [The tracked window]).
// - TrackUntrack: what a block's allocation and free pay with 10^4 blocks tracked.
// - LookupBinarySearch: one word found by binary search over the sorted ranges, the alternative
//   Note [Use lookups take no lock] compares the hash with.
//
// Run by hand: build/tests/shim/bench/vramspill_use_tracking_bench (a Release-like build).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/launch_arguments.h"
#include "core/use_tracker.h"

namespace vramspill::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = uint64_t{0x7f00} << 32;

// The fake driver's layout queries, asked once each (the cache answers after). As for the
// CUkernel handles the CUDA runtime launches, the function query refuses the handle.
CUresult refuse_function(CUfunction, size_t, size_t*, size_t*) { return CUDA_ERROR_INVALID_HANDLE; }
// 8 parameters of 8 bytes.
CUresult eight_params(CUkernel, size_t index, size_t* offset, size_t* size) {
  if (index >= 8) return CUDA_ERROR_INVALID_VALUE;
  *offset = index * 8;
  *size = 8;
  return CUDA_SUCCESS;
}
// A 4 KiB struct, then two pointers.
CUresult struct_then_two(CUkernel, size_t index, size_t* offset, size_t* size) {
  constexpr size_t kOffsets[] = {0, 4096, 4104};
  constexpr size_t kSizes[] = {4096, 8, 8};
  if (index >= 3) return CUDA_ERROR_INVALID_VALUE;
  *offset = kOffsets[index];
  *size = kSizes[index];
  return CUDA_SUCCESS;
}
constexpr LayoutQueries kEightParams{.function = refuse_function, .kernel = eight_params};
constexpr LayoutQueries kStructThenTwo{.function = refuse_function, .kernel = struct_then_two};

// A tracker holding `ranges` ranges of 2 MiB, 4 MiB apart. Every benchmark asks for 10^4: built
// once (a second or two, each track() rebuilding the snapshot).
UseTracker& tracker_with(int64_t ranges) {
  static UseTracker* tracker = nullptr;
  static int64_t tracked = -1;
  if (tracked != ranges) {
    delete tracker;
    tracker = new UseTracker;
    for (int64_t block = 0; block < ranges; ++block)
      tracker->track(kBase + static_cast<uint64_t>(block) * 4 * kMiB, 2 * kMiB,
                     static_cast<BlockId>(block));
    tracked = ranges;
  }
  return *tracker;
}

struct EightParams {
  uint64_t values[8];
  void* pointers[8];

  EightParams(int64_t ranges, int64_t hits, uint64_t salt) {
    const uint64_t misses[8] = {1000, 7, 0x3f800000, 4096, 0x7e00ull << 32, 0, 99, 12};
    std::memcpy(values, misses, sizeof values);
    for (int64_t hit = 0; hit < hits; ++hit)
      values[hit * 3 % 8] =
          kBase + (static_cast<uint64_t>(hit * 977 + salt) % static_cast<uint64_t>(ranges)) * 4 *
                      kMiB + 4096;
    for (int index = 0; index < 8; ++index) pointers[index] = &values[index];
  }
};

// What the launch hook does with use tracking on (hooks/use_tracking.cpp's record_kernel).
void launches(benchmark::State& state, UseTracker& tracker, void** pointers,
              const LayoutQueries& queries, uint32_t hits) {
  ParamLayoutCache cache;
  const CUfunction function = reinterpret_cast<CUfunction>(0x5000);
  LaunchWords words;
  SubmissionUse use;
  for (auto _ : state) {
    if (argument_words(function, pointers, nullptr, cache, queries, words) !=
        ArgumentsRead::kRead) {
      state.SkipWithError("the layout could not be read");
      break;
    }
    tracker.record_words(1, words.view(), use);
    benchmark::DoNotOptimize(use);
  }
  if (use.count != hits) state.SkipWithError("wrong hits");
}

void BM_TrackedLaunch(benchmark::State& state) {
  const EightParams params(state.range(0), state.range(1), 0);
  launches(state, tracker_with(state.range(0)), const_cast<void**>(params.pointers), kEightParams,
           static_cast<uint32_t>(state.range(1)));
}
BENCHMARK(BM_TrackedLaunch)
    ->ArgNames({"ranges", "hits"})
    ->Args({10000, 0})
    ->Args({10000, 2})
    ->Args({10000, 8});

void BM_TrackedLaunchStruct(benchmark::State& state) {
  const int64_t ranges = state.range(0), hits = state.range(1);
  std::vector<uint64_t> list(512);  // 256 pointers, then 256 sizes: 4 KiB
  for (size_t index = 0; index < 256; ++index) list[index] = (uint64_t{0x7e00} << 32) + index * 64;
  for (int64_t hit = 0; hit < hits; ++hit)
    list[static_cast<size_t>(hit)] = kBase + static_cast<uint64_t>(hit * 977 % ranges) * 4 * kMiB;
  for (size_t index = 256; index < 512; ++index) list[index] = 4096 + index;
  uint64_t bare[2] = {0x7e00ull << 32, 12};
  void* pointers[] = {list.data(), &bare[0], &bare[1]};
  launches(state, tracker_with(ranges), pointers, kStructThenTwo, static_cast<uint32_t>(hits));
}
BENCHMARK(BM_TrackedLaunchStruct)
    ->ArgNames({"ranges", "hits"})
    ->Args({10000, 0})
    ->Args({10000, 8})
    ->Args({10000, 32})
    ->Args({10000, 128})
    ->Args({10000, 256});

// The two halves of TrackedLaunch: reading the words, and looking them up.
void BM_ReadWords(benchmark::State& state) {
  const EightParams params(10000, 2, 0);
  ParamLayoutCache cache;
  const CUfunction function = reinterpret_cast<CUfunction>(0x5000);
  LaunchWords words;
  for (auto _ : state) {
    argument_words(function, const_cast<void**>(params.pointers), nullptr, cache, kEightParams,
                   words);
    benchmark::DoNotOptimize(words);
  }
}
BENCHMARK(BM_ReadWords);

void BM_RecordWords(benchmark::State& state) {
  UseTracker& tracker = tracker_with(state.range(0));
  const EightParams params(state.range(0), state.range(1), 0);
  SubmissionUse use;
  for (auto _ : state) {
    tracker.record_words(1, params.values, use);
    benchmark::DoNotOptimize(use);
  }
}
BENCHMARK(BM_RecordWords)->ArgNames({"ranges", "hits"})->Args({10000, 0})->Args({10000, 2});

// What the tracked window adds inside the window (Note [The tracked window]): marking the
// launch's stream on the blocks it touched, their bits already set (the common case: a stream
// goes on using the same blocks), and ending it on its slot (the event, every kRecordEvery
// marks, is a driver call not counted here).
void BM_MarkStreams(benchmark::State& state) {
  UseTracker& tracker = tracker_with(state.range(0));
  const EightParams params(state.range(0), state.range(1), 0);
  SubmissionUse use;
  tracker.record_words(1, params.values, use);
  StreamSlots& slots = tracker.stream_slots();
  for (auto _ : state) {
    // No driver here: a due event is "recorded" as none, which drops it.
    if (const auto due = slots.end_call(tracker.mark_streams(use))) slots.recorded(*due, 0, 0);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_MarkStreams)->ArgNames({"ranges", "hits"})->Args({10000, 2})->Args({10000, 8});

void BM_TrackedLaunchThreads(benchmark::State& state) {
  UseTracker& tracker = tracker_with(10000);
  const EightParams params(10000, 2, static_cast<uint64_t>(state.thread_index()) * 5000);
  launches(state, tracker, const_cast<void**>(params.pointers), kEightParams, 2);
}
BENCHMARK(BM_TrackedLaunchThreads)->Threads(2)->UseRealTime();

// track() and untrack() of one more block beside N: each rebuilds the snapshot and waits out its
// readers (Note [Retiring a snapshot]).
void BM_TrackUntrack(benchmark::State& state) {
  UseTracker& tracker = tracker_with(state.range(0));
  const uint64_t base = kBase + static_cast<uint64_t>(state.range(0)) * 4 * kMiB;
  for (auto _ : state) {
    if (tracker.track(base, 2 * kMiB, ~BlockId{0}) != TrackResult::kTracked ||
        !tracker.untrack(base)) {
      state.SkipWithError("track or untrack failed");
      break;
    }
  }
}
BENCHMARK(BM_TrackUntrack)->ArgName("ranges")->Arg(10000);

void BM_LookupBinarySearch(benchmark::State& state) {
  std::vector<uint64_t> bases;
  for (uint64_t block = 0; block < 10000; ++block) bases.push_back(kBase + block * 4 * kMiB);
  uint64_t word = kBase + 4567 * 4 * kMiB + 100;
  for (auto _ : state) {
    benchmark::DoNotOptimize(word);
    auto found = std::upper_bound(bases.begin(), bases.end(), word);
    benchmark::DoNotOptimize(found);
    word ^= 4 * kMiB;  // alternate between two ranges, as a launch's arguments do
  }
}
BENCHMARK(BM_LookupBinarySearch);

}  // namespace
}  // namespace vramspill::core
