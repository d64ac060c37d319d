// mover_probe: the rate tiered mode's own mover reaches on this machine. It drives the shim's
// granule arena (shim/tiers/granule_arena.h) through the same driver calls the shim makes
// (shim/tiers/driver_granule_ops.h), on whatever libcuda.so.1 it finds: a GPU's, where
// tools/gpu-check.sh runs it, or simcuda's, where a test does.
//
// Half the blocks start on the device and half on the host; each round moves all of them the
// other way in one remap window (one GranuleArena::move(): the evictions' and the promotions'
// granules in one batch, as a launch that needs its blocks in and others out asks for), then
// the next round moves them back. The first round is a warm-up: it makes the granules' homes
// (Note [Granule homes] in shim/tiers/granule_homes.h) and fills the pools, which a training
// loop pays once. Reported per round, the median of the rest:
//   - the window's time: from before the first VMM call to after the copies are over, measured
//     by CUDA events on an idle stream (on simcuda, its modeled host clock: work queued after a
//     call starts no earlier than the call's modeled end, so the events show what the model
//     charges, not simcuda's own CPU time);
//   - the effective rate: the bytes moved, both directions together, over that time;
//   - the VMM calls the moves made, per GiB moved;
//   - the link's rate for one copy of a block from host to device memory, for scale.
// Every word of every block is checked at the end.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/remap_window.h"
#include "tiers/driver_granule_ops.h"
#include "tiers/granule_arena.h"

namespace {

using vramspill::tiers::GranuleArena;
using vramspill::tiers::GranuleKind;
using vramspill::tiers::GranuleMove;

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Options {
  uint64_t mib = 1024;        // moved each way per round
  uint64_t block_mib = 64;    // the size of each block
  int rounds = 3;             // measured, after the warm-up
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: mover_probe [--mib N] [--block-mib M] [--rounds R]\n"
               "Moves N MiB of blocks of M MiB from the device to the host and N MiB from the\n"
               "host to the device in one remap window, R times after a warm-up, through the\n"
               "granule arena tiered mode uses, and prints the window's time, the effective\n"
               "rate (bytes moved both ways over that time) and the VMM calls per GiB moved.\n"
               "  --mib N        MiB moved each way (default 1024)\n"
               "  --block-mib M  MiB per block, a multiple of 2 (default 64)\n"
               "  --rounds R     measured rounds (default 3)\n"
               "It needs about 2N MiB of device memory: the promotions take their granules\n"
               "before the evictions give theirs back.\n"
               "On simcuda the times are its cost model's (modeled), not a measurement.\n");
}

// A positive number from `text`, or nullopt.
std::optional<uint64_t> positive(const char* text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value == 0) return std::nullopt;
  return value;
}

// 0 to go on, else the exit status.
int parse(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage(stdout);
      return -1;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "mover_probe: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::optional<uint64_t> value = positive(argv[++i]);
    if (!value) {
      std::fprintf(stderr, "mover_probe: %s: expected a positive whole number, got '%s'\n",
                   flag.c_str(), argv[i]);
      return 2;
    }
    if (flag == "--mib") {
      options.mib = *value;
    } else if (flag == "--block-mib") {
      options.block_mib = *value;
    } else if (flag == "--rounds") {
      options.rounds = static_cast<int>(std::min<uint64_t>(*value, 100));
    } else {
      std::fprintf(stderr, "mover_probe: unknown option %s\n", flag.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (options.block_mib % 2 != 0 || options.mib % options.block_mib != 0) {
    std::fprintf(stderr,
                 "mover_probe: --block-mib must be a multiple of 2 that divides --mib (got %llu "
                 "and %llu)\n",
                 static_cast<unsigned long long>(options.block_mib),
                 static_cast<unsigned long long>(options.mib));
    return 2;
  }
  return 0;
}

const char* error_name(CUresult result) {
  const char* name = nullptr;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS ? name : "an unknown error";
}

#define MUST(call)                                                                         \
  do {                                                                                     \
    const CUresult must_result = (call);                                                   \
    if (must_result != CUDA_SUCCESS) {                                                     \
      std::fprintf(stderr, "mover_probe: %s failed: %s\n", #call, error_name(must_result)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// The device's host NUMA node for host granules, or -1 for the host as a whole.
int host_numa_node(CUdevice device) {
  int node = -1;
  if (cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device) != CUDA_SUCCESS)
    return -1;
  return node;
}

uint32_t pattern_of(std::size_t block) { return 0x5eed0000u + static_cast<uint32_t>(block); }

struct Probe {
  CUstream stream = nullptr;
  CUevent start = nullptr;
  CUevent stop = nullptr;
  bool simulated = false;
};

// Milliseconds from `start` to `stop`, both recorded on the probe's idle stream.
float elapsed_ms(const Probe& probe) {
  MUST(cuEventSynchronize(probe.stop));
  float ms = 0;
  MUST(cuEventElapsedTime(&ms, probe.start, probe.stop));
  return ms;
}

// The link's rate for one copy of `bytes` from `host` (host-located memory) to device memory,
// in GB/s.
double link_rate(const Probe& probe, CUdeviceptr host, uint64_t bytes) {
  CUdeviceptr device = 0;
  MUST(cuMemAlloc(&device, bytes));
  MUST(cuCtxSynchronize());
  MUST(cuEventRecord(probe.start, probe.stream));
  MUST(cuMemcpyAsync(device, host, bytes, probe.stream));
  MUST(cuEventRecord(probe.stop, probe.stream));
  const double rate = static_cast<double>(bytes) / (elapsed_ms(probe) * 1e6);
  MUST(cuMemFree(device));
  return rate;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const int parsed = parse(argc, argv, options); parsed != 0) return parsed < 0 ? 0 : parsed;
  MUST(cuInit(0));
  CUdevice device = 0;
  MUST(cuDeviceGet(&device, 0));
  char name[128] = {};
  MUST(cuDeviceGetName(name, sizeof name, device));
  CUcontext context = nullptr;
  MUST(cuDevicePrimaryCtxRetain(&context, device));
  MUST(cuCtxSetCurrent(context));
  Probe probe;
  probe.simulated = std::strncmp(name, "simcuda", 7) == 0;
  MUST(cuStreamCreate(&probe.stream, CU_STREAM_NON_BLOCKING));
  MUST(cuEventCreate(&probe.start, CU_EVENT_DEFAULT));
  MUST(cuEventCreate(&probe.stop, CU_EVENT_DEFAULT));
  const char* labelled = probe.simulated ? "modeled by simcuda, not measured" : "measured";
  std::printf("mover_probe on %s: %llu MiB each way in blocks of %llu MiB; times %s\n", name,
              static_cast<unsigned long long>(options.mib),
              static_cast<unsigned long long>(options.block_mib), labelled);

  int exit_status = 0;
  {
    vramspill::tiers::DriverGranuleOps ops(device, host_numa_node(device));
    GranuleArena arena(ops, {});
    vramspill::core::RemapWindow window;
    const std::size_t per_side = options.mib / options.block_mib;
    const uint64_t block_bytes = options.block_mib * kMiB;
    const uint64_t granules = GranuleArena::granules_for(block_bytes);
    std::vector<CUdeviceptr> blocks(2 * per_side);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const uint64_t on_device = i < per_side ? granules : 0;
      if (const CUresult made = arena.allocate(block_bytes, on_device, &blocks[i]);
          made != CUDA_SUCCESS) {
        std::fprintf(stderr, "mover_probe: a block of %llu MiB could not be made: %s\n",
                     static_cast<unsigned long long>(options.block_mib), error_name(made));
        return 1;
      }
      MUST(cuMemsetD32Async(blocks[i], pattern_of(i), block_bytes / 4, probe.stream));
    }
    MUST(cuStreamSynchronize(probe.stream));
    const double link = link_rate(probe, blocks[per_side], block_bytes);

    std::vector<double> window_ms;
    std::vector<double> calls_per_gib;
    uint64_t failed = 0;
    for (int round = 0; round <= options.rounds; ++round) {
      std::vector<GranuleMove> moves;
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        const bool on_device = arena.block_containing(blocks[i])->device_granules != 0;
        moves.push_back({.base = blocks[i],
                         .to = on_device ? GranuleKind::kHost : GranuleKind::kDevice,
                         .granules = 0});
      }
      const uint64_t calls_before = arena.stats().move_vmm_calls;
      MUST(cuCtxSynchronize());
      MUST(cuEventRecord(probe.start, probe.stream));
      vramspill::tiers::MoveOutcome outcome;
      {
        const vramspill::core::RemapWindow::Exclusive closed = window.close();
        outcome = arena.move(moves, closed);
      }
      MUST(cuEventRecord(probe.stop, probe.stream));
      const double ms = elapsed_ms(probe);
      if (outcome.result != CUDA_SUCCESS || outcome.to_device != per_side * granules ||
          outcome.to_host != per_side * granules) {
        std::fprintf(stderr, "mover_probe: round %d moved %llu and %llu granules: %s\n", round,
                     static_cast<unsigned long long>(outcome.to_host),
                     static_cast<unsigned long long>(outcome.to_device),
                     error_name(outcome.result));
        ++failed;
        continue;
      }
      const double gib_moved = 2.0 * static_cast<double>(options.mib) / 1024.0;
      const double calls =
          static_cast<double>(arena.stats().move_vmm_calls - calls_before) / gib_moved;
      std::printf("  round %d%s: %.2f ms, %.1f GB/s effective, %.0f VMM calls per GiB moved\n",
                  round, round == 0 ? " (warm-up: homes made)" : "", ms,
                  gib_moved * double(1 << 30) / (ms * 1e6), calls);
      if (round == 0) continue;
      window_ms.push_back(ms);
      calls_per_gib.push_back(calls);
    }
    if (!window_ms.empty()) {
      const double ms = median(window_ms);
      const double rate = 2.0 * static_cast<double>(options.mib * kMiB) / (ms * 1e6);
      std::printf("one window moving %llu MiB each way (median of %zu rounds; %s):\n"
                  "  window %.2f ms, effective rate %.1f GB/s (bytes moved both ways over the "
                  "window's time)\n"
                  "  %.0f VMM calls per GiB moved\n"
                  "  the link: %.1f GB/s for one host-to-device copy of a block; the mover ran "
                  "at %.2fx of it\n",
                  static_cast<unsigned long long>(options.mib), window_ms.size(), labelled, ms,
                  rate, median(calls_per_gib), link, rate / link);
    }

    // Every word of every block, as it was written.
    std::vector<uint32_t> words(block_bytes / 4);
    uint64_t wrong_blocks = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      MUST(cuMemcpyDtoH(words.data(), blocks[i], block_bytes));
      const uint32_t expected = pattern_of(i);
      if (std::any_of(words.begin(), words.end(), [&](uint32_t word) { return word != expected; }))
        ++wrong_blocks;
    }
    for (const CUdeviceptr block : blocks) arena.free(block);
    std::printf("verified %zu blocks: %llu wrong\n", blocks.size(),
                static_cast<unsigned long long>(wrong_blocks));
    if (wrong_blocks != 0 || failed != 0) exit_status = 1;
  }
  MUST(cuEventDestroy(probe.start));
  MUST(cuEventDestroy(probe.stop));
  MUST(cuStreamDestroy(probe.stream));
  MUST(cuDevicePrimaryCtxRelease(device));
  std::printf("mover_probe: %s\n", exit_status == 0 ? "done" : "FAILED");
  return exit_status;
}
