// Workloads that tell tiered mode's eviction policies apart, for comparing them on simcuda's cost
// model (run by compare_policies.py; issue 8, item 5). Each is a driver-API loop over a working
// set of --factor times the budget cuMemGetInfo reports, in blocks of one or two units (a unit is
// a 16th of the budget, in whole 2 MiB granules):
//
//   training   layers of parameters and gradients (a unit each), activations and optimizer state
//              (two units each), each its own block. A step runs forward over the layers in order
//              (activations from the parameters and the previous layer's activations), backward in
//              reverse (gradients from the next layer's, the activations and the parameters), then
//              the optimizer over every layer's state, gradients and parameters: three kernels a
//              layer in each pass. A loop over more than fits: lru evicts what comes next.
//   inference  weights read every step in order, and a KV cache that grows by one block a step
//              (written once, then read whole every step); the working set reaches --factor times
//              the budget at the last step, and the launches never repeat exactly.
//   random     each step, one launch per block (a fill, or a copy between two blocks) on blocks
//              drawn from a fixed-seed generator, skewed towards the first blocks (the smaller of
//              two uniform draws): no period, a hot set with a long tail.
//
// The host mirrors every block (Note [Uniform blocks]); at the end each block is copied back
// through one reusable host buffer and compared word for word. Prints the step count and
// "modeled_ms_per_step <t>": the modeled time of the steps after the first (which places the
// blocks), from cuEventElapsedTime on simcuda's cost model: modeled, not measured. Exit status:
// 0 verified, 1 a driver call failed, 2 bad usage, 3 a block did not hold what the host expected.
#include <cuda.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "workload_support.h"

namespace {

enum Status { kOk = 0, kError = 1, kUsage = 2, kMismatch = 3 };

constexpr size_t kGranule = size_t{2} << 20;
constexpr uint64_t kRandomSeed = 0x5eed'cafe'f00d'1234;

constexpr const char* kProgram = "policy_workloads";

#define CHECK(call) WORKLOAD_CHECK(call, kError)

#define TRY(call)                                                   \
  do {                                                              \
    if (const Status status = (call); status != kOk) return status; \
  } while (0)

uint32_t word_of(float value) { return std::bit_cast<uint32_t>(value); }

// Note [Uniform blocks]
// A block is a whole number of *units* (a 16th of the budget, in whole granules), and a kernel
// here covers whole units: a fill a whole block, a copy or y += a*x the units the smaller of its
// two blocks has. So a unit whose words are all equal stays so, and the host mirrors each unit by
// one word: checking the data costs a copy back at the end, not a host copy of the working set.
// vs_axpy_f32 rounds its multiply and its add separately; so does this (the file is built with
// -ffp-contract=off), so the mirror is bit-exact however the values grow.
uint32_t axpy_word(uint32_t y, uint32_t x, float a) {
  const float product = a * std::bit_cast<float>(x);
  return word_of(product + std::bit_cast<float>(y));
}

// The device, the kernels, one stream, and the blocks with the word each unit of each must hold.
class Blocks {
 public:
  // `total`: what cuMemGetInfo reports (under the shim, the budget).
  Status open(size_t& total) {
    CUmodule module = nullptr;
    CHECK(workload_support::open_device(&context_, &module));
    CHECK(cuModuleGetFunction(&fill_, module, "vs_fill_u32"));
    CHECK(cuModuleGetFunction(&copy_, module, "vs_copy"));
    CHECK(cuModuleGetFunction(&axpy_, module, "vs_axpy_f32"));
    CHECK(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&start_, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end_, CU_EVENT_DEFAULT));
    size_t free_bytes = 0;
    CHECK(cuMemGetInfo(&free_bytes, &total));
    return kOk;
  }

  // Before the first allocation.
  void set_unit_bytes(size_t bytes) { unit_bytes_ = bytes; }

  size_t count() const { return blocks_.size(); }
  size_t unit_bytes() const { return unit_bytes_; }
  size_t bytes() const {
    size_t units = 0;
    for (const Block& block : blocks_) units += block.words.size();
    return units * unit_bytes_;
  }

  // A new block of `units` units holding `word` everywhere; `index` is its number.
  Status allocate(size_t units, uint32_t word, size_t& index) {
    CUdeviceptr address = 0;
    CHECK(cuMemAlloc(&address, units * unit_bytes_));
    index = blocks_.size();
    blocks_.push_back({address, std::vector<uint32_t>(units)});
    return fill(index, word);
  }

  Status fill(size_t block, uint32_t word) {
    Block& filled = blocks_[block];
    CUdeviceptr destination = filled.address;
    uint64_t count = filled.words.size() * unit_words();
    void* params[] = {&destination, &word, &count};
    CHECK(launch(fill_, params));
    std::fill(filled.words.begin(), filled.words.end(), word);
    return kOk;
  }

  Status copy(size_t destination, size_t source) {
    Block& to = blocks_[destination];
    const Block& from = blocks_[source];
    const size_t units = std::min(to.words.size(), from.words.size());
    CUdeviceptr to_address = to.address;
    CUdeviceptr from_address = from.address;
    uint64_t bytes = units * unit_bytes_;
    void* params[] = {&to_address, &from_address, &bytes};
    CHECK(launch(copy_, params));
    std::copy_n(from.words.begin(), units, to.words.begin());
    return kOk;
  }

  // y += a * x, y and x blocks (the same one allowed: y = (1 + a) y).
  Status axpy(size_t y, size_t x, float a) {
    Block& to = blocks_[y];
    const Block& from = blocks_[x];
    const size_t units = std::min(to.words.size(), from.words.size());
    CUdeviceptr to_address = to.address;
    CUdeviceptr from_address = from.address;
    uint64_t count = units * unit_words();
    void* params[] = {&to_address, &from_address, &a, &count};
    CHECK(launch(axpy_, params));
    for (size_t unit = 0; unit < units; ++unit) {
      to.words[unit] = axpy_word(to.words[unit], from.words[unit], a);
    }
    return kOk;
  }

  Status start_timing() {
    CHECK(cuEventRecord(start_, stream_));
    return kOk;
  }

  Status stop_timing(float& milliseconds) {
    CHECK(cuEventRecord(end_, stream_));
    CHECK(cuEventSynchronize(end_));
    CHECK(cuEventElapsedTime(&milliseconds, start_, end_));
    return kOk;
  }

  // Every word of every block against its mirror, then frees them.
  Status verify_and_free() {
    std::vector<uint32_t> host;
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const std::vector<uint32_t>& expected = blocks_[i].words;
      host.resize(expected.size() * unit_words());
      CHECK(cuMemcpyDtoH(host.data(), blocks_[i].address, host.size() * sizeof(uint32_t)));
      for (size_t word = 0; word < host.size(); ++word) {
        if (host[word] != expected[word / unit_words()]) {
          std::fprintf(stderr,
                       "policy_workloads: block %zu holds 0x%08x at word %zu, expected 0x%08x\n", i,
                       host[word], word, expected[word / unit_words()]);
          return kMismatch;
        }
      }
    }
    for (const Block& block : blocks_) CHECK(cuMemFree(block.address));
    blocks_.clear();
    return kOk;
  }

 private:
  struct Block {
    CUdeviceptr address;
    std::vector<uint32_t> words;  // what each word of each unit holds (Note [Uniform blocks])
  };

  uint64_t unit_words() const { return unit_bytes_ / sizeof(uint32_t); }
  CUresult launch(CUfunction function, void** params) const {
    return cuLaunchKernel(function, 64, 1, 1, 256, 1, 1, 0, stream_, params, nullptr);
  }

  size_t unit_bytes_ = 0;
  CUcontext context_ = nullptr;
  CUfunction fill_ = nullptr;
  CUfunction copy_ = nullptr;
  CUfunction axpy_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr;
  CUevent end_ = nullptr;
  std::vector<Block> blocks_;
};

// A workload: its blocks, and one step.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual Status setup(Blocks& blocks) = 0;
  virtual Status step(Blocks& blocks, int step) = 0;
};

// Parameters and gradients of a unit each, activations and optimizer state (two moments, as
// Adam's) of two: sizes differ, as a size-aware policy needs.
class Training final : public Workload {
 public:
  static constexpr size_t kUnitsPerLayer = 6;
  explicit Training(size_t layers) : layers_(layers) {}

  Status setup(Blocks& blocks) override {
    for (size_t k = 0; k < layers_.size(); ++k) {
      Layer& layer = layers_[k];
      TRY(blocks.allocate(1, word_of(1.0f + static_cast<float>(k)), layer.params));
      TRY(blocks.allocate(2, word_of(0.0f), layer.activations));
      TRY(blocks.allocate(1, word_of(0.0f), layer.gradients));
      TRY(blocks.allocate(2, word_of(0.0f), layer.state));
    }
    return kOk;
  }

  Status step(Blocks& blocks, int /*step*/) override {
    const size_t count = layers_.size();
    for (size_t k = 0; k < count; ++k) {  // forward: a = p + 0.5 a[k-1] + p
      const Layer& layer = layers_[k];
      TRY(blocks.copy(layer.activations, layer.params));
      if (k > 0) TRY(blocks.axpy(layer.activations, layers_[k - 1].activations, 0.5f));
      TRY(blocks.axpy(layer.activations, layer.params, 1.0f));
    }
    for (size_t k = count; k-- > 0;) {  // backward: g = g[k+1] (or a) + 0.25 a + 0.125 p
      const Layer& layer = layers_[k];
      TRY(blocks.copy(layer.gradients,
                      k + 1 < count ? layers_[k + 1].gradients : layer.activations));
      TRY(blocks.axpy(layer.gradients, layer.activations, 0.25f));
      TRY(blocks.axpy(layer.gradients, layer.params, 0.125f));
    }
    for (const Layer& layer : layers_) {  // optimizer: s = 0.5 s; m += g; p -= 2^-7 m
      TRY(blocks.axpy(layer.state, layer.state, -0.5f));
      TRY(blocks.axpy(layer.state, layer.gradients, 1.0f));
      TRY(blocks.axpy(layer.params, layer.state, -0.0078125f));
    }
    return kOk;
  }

 private:
  struct Layer {
    size_t params = 0;
    size_t activations = 0;
    size_t gradients = 0;
    size_t state = 0;
  };
  std::vector<Layer> layers_;
};

// The weights take what the activations and the cache's last size leave of the working set.
class Inference final : public Workload {
 public:
  explicit Inference(size_t weights) : weights_(weights) {}

  Status setup(Blocks& blocks) override {
    TRY(blocks.allocate(1, word_of(0.0f), activations_));
    for (size_t i = 0; i < weights_.size(); ++i) {
      TRY(blocks.allocate(1, word_of(0.25f * static_cast<float>(i + 1)), weights_[i]));
    }
    return kOk;
  }

  Status step(Blocks& blocks, int step) override {
    size_t appended = 0;  // this step's cache entry
    TRY(blocks.allocate(1, word_of(0.0f), appended));
    cache_.push_back(appended);
    TRY(blocks.fill(activations_, word_of(static_cast<float>(step + 1))));
    for (const size_t weight : weights_) TRY(blocks.axpy(activations_, weight, 0.0625f));
    TRY(blocks.copy(appended, activations_));
    for (const size_t entry : cache_) TRY(blocks.axpy(activations_, entry, 0.125f));
    return kOk;
  }

 private:
  size_t activations_ = 0;
  std::vector<size_t> weights_;  // block numbers
  std::vector<size_t> cache_;
};

// Blocks of one and two units, alternately.
class Random final : public Workload {
 public:
  static constexpr double kUnitsPerBlock = 1.5;
  explicit Random(size_t count) : count_(count) {}

  Status setup(Blocks& blocks) override {
    for (size_t i = 0; i < count_; ++i) {
      size_t block = 0;
      TRY(blocks.allocate(1 + i % 2, static_cast<uint32_t>(i), block));
    }
    return kOk;
  }

  // One launch per block: fills and copies, alternately, on skewed draws.
  Status step(Blocks& blocks, int step) override {
    for (size_t launch = 0; launch < count_; ++launch) {
      const size_t destination = draw();
      const size_t source = draw();
      if (launch % 2 == 0 || source == destination) {
        TRY(blocks.fill(destination, static_cast<uint32_t>(step * 100000 + launch)));
      } else {
        TRY(blocks.copy(destination, source));
      }
    }
    return kOk;
  }

 private:
  // splitmix64: fixed seed, no clock, the same blocks on every run.
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }
  // The smaller of two uniform draws: block i comes with weight 2 (count - i) - 1.
  size_t draw() { return std::min(next() % count_, next() % count_); }

  size_t count_;
  uint64_t state_ = kRandomSeed;
};

struct Options {
  std::string_view workload;
  double factor = 1.5;
  int steps = 8;
};

void usage(FILE* out) {
  std::fprintf(out,
               "Usage: policy_workloads training|inference|random [--factor F] [--steps N]\n"
               "  --factor F  working set = F x the total cuMemGetInfo reports (default 1.5)\n"
               "  --steps N   steps, at least 2; the first is not timed (default 8)\n");
}

bool parse(int argc, char** argv, Options& options) {
  if (argc < 2) return false;
  options.workload = argv[1];
  if (options.workload != "training" && options.workload != "inference" &&
      options.workload != "random") {
    return false;
  }
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string_view name = argv[i];
    const char* value = argv[i + 1];
    const char* end = value + std::strlen(value);
    if (name == "--factor") {
      if (std::from_chars(value, end, options.factor).ptr != end || !(options.factor > 0)) {
        return false;
      }
    } else if (name == "--steps") {
      if (std::from_chars(value, end, options.steps).ptr != end || options.steps < 2) return false;
    } else {
      return false;
    }
  }
  return argc % 2 == 0;
}

// `bytes` rounded to whole granules, at least one.
size_t whole_granules(double bytes) {
  return std::max<size_t>(1, std::llround(bytes / kGranule)) * kGranule;
}

// The workload `options` names, with the unit set in `blocks`: a 16th of the budget (`total`),
// in whole granules. The number of blocks makes the working set (Note [Uniform blocks]).
std::unique_ptr<Workload> make_workload(const Options& options, size_t total, Blocks& blocks) {
  const size_t unit_bytes = whole_granules(static_cast<double>(total) / 16);
  blocks.set_unit_bytes(unit_bytes);
  const double units =
      options.factor * static_cast<double>(total) / static_cast<double>(unit_bytes);
  const auto at_least_one = [](double count) { return std::max<size_t>(1, std::llround(count)); };
  if (options.workload == "training") {
    return std::make_unique<Training>(at_least_one(units / Training::kUnitsPerLayer));
  }
  if (options.workload == "inference") {
    const size_t others = 1 + static_cast<size_t>(options.steps);  // activations, the cache
    return std::make_unique<Inference>(at_least_one(units - static_cast<double>(others)));
  }
  return std::make_unique<Random>(at_least_one(units / Random::kUnitsPerBlock));
}

Status run(const Options& options) {
  Blocks blocks;
  size_t total = 0;
  TRY(blocks.open(total));
  const std::unique_ptr<Workload> workload = make_workload(options, total, blocks);
  TRY(workload->setup(blocks));
  TRY(workload->step(blocks, 0));  // places the blocks; not timed
  TRY(blocks.start_timing());
  for (int step = 1; step < options.steps; ++step) TRY(workload->step(blocks, step));
  float milliseconds = 0;
  TRY(blocks.stop_timing(milliseconds));
  const size_t count = blocks.count();
  const size_t bytes = blocks.bytes();
  TRY(blocks.verify_and_free());
  std::printf(
      "%.*s: %zu blocks, %zu MiB in units of %zu MiB (%.2fx the %zu MiB cuMemGetInfo "
      "reports), verified\n",
      static_cast<int>(options.workload.size()), options.workload.data(), count, bytes >> 20,
      blocks.unit_bytes() >> 20, static_cast<double>(bytes) / static_cast<double>(total),
      total >> 20);
  std::printf("steps %d\n", options.steps);
  std::printf("modeled_ms_per_step %.4f\n",
              static_cast<double>(milliseconds) / (options.steps - 1));
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    usage(stderr);
    return kUsage;
  }
  return run(options);
}
