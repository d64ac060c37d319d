// Generated training jobs as `vramspill replay` sees them (tools/cli/trace_replay.h): the tiered
// blocks of a framework's caching allocator (segments that live for the whole job) and the
// blocks each launch touches, step after step, at a budget some factor below what they take.
//
// A job has `layers` layers, each with its own sizes, drawn between 1 and 128 granules (2-256
// MiB) on a log scale so that small and large blocks mix: a weight, its gradient and Adam's two
// moments (one size), and the layer's pre-activation and activation (another). Before the first
// step come the weights, the batch and its targets; the first forward pass allocates the
// activations, the first backward pass the gradients and its scratch blocks, the first optimizer
// step the moments, each at its first use, as PyTorch does. Each step:
// - forward, layer by layer: a matmul (input, weight, pre-activation) and the activation;
// - the loss (last activation, targets, a small loss block);
// - backward, last layer first: the loss's gradient into a block of the last activation's size,
//   then for each layer the activation's gradient (gradient in, pre-activation, scratch), the
//   weight's gradient (scratch, input, gradient) and the input's (scratch, weight, gradient out),
//   through three scratch blocks as large as the largest activation;
// - the optimizer: Adam per layer (weight, gradient, moments) or, `foreach`, two multi-tensor
//   launches for each group of four layers (gradients and moments, then weights and moments).
// Options a real job has: `workspace`, a block every matmul touches (cuBLAS's workspace);
// `rotating`, three blocks for the loss's gradient that the allocator hands out in turn, one a
// step, so that the launches repeat exactly only every three steps while all but two a step
// match the step before (as in a PyTorch job recorded on an H200: 6 launches of 211 a step,
// three blocks of 16 MiB); `micro_batches` forward and backward passes before each optimizer
// step; `zeroed`, a launch of its own that zeroes each moment where the first step allocates it
// (PyTorch's Adam creates its state with zeros_like), so that the first step is longer than the
// others and the second repeats it at no one distance (as in the H200 job).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "trace_replay.h"

namespace vramspill::cli::testing {

struct TrainingLoop {
  uint32_t layers = 2;
  double factor = 1.5;  // the blocks' granules over the budget's
  uint32_t steps = 12;
  bool foreach = false;
  bool workspace = false;
  bool rotating = false;
  uint32_t micro_batches = 1;
  bool zeroed = false;
  uint64_t seed = 1;

  std::string name() const {
    char text[96];
    std::snprintf(text, sizeof text, "%u layers at %.2fx%s%s%s%s%s, seed %llu", layers, factor,
                  foreach ? ", foreach" : "", workspace ? ", workspace" : "",
                  rotating ? ", rotating" : "", micro_batches > 1 ? ", 2 micro-batches" : "",
                  zeroed ? ", zeroed" : "", static_cast<unsigned long long>(seed));
    return text;
  }
};

namespace detail {

// Builds the steps; blocks are numbered in allocation order, as replay_input numbers them.
class LoopBuilder {
 public:
  uint64_t allocate(uint64_t granules) {
    input_.steps.push_back({.kind = ReplayStep::Kind::kAlloc,
                            .stream = 0,
                            .blocks = {input_.blocks},
                            .granules = granules});
    input_.block_bytes += granules << 21;
    total_granules_ += granules;
    return input_.blocks++;
  }
  void launch(std::vector<uint64_t> blocks) {
    input_.steps.push_back({.kind = ReplayStep::Kind::kUse, .stream = 0, .blocks = blocks});
    ++input_.submissions;
  }
  ReplayInput finish(double factor) {
    input_.budget_granules =
        static_cast<uint64_t>(std::floor(static_cast<double>(total_granules_) / factor));
    return std::move(input_);
  }

 private:
  ReplayInput input_;
  uint64_t total_granules_ = 0;
};

// A block that is allocated at its first use.
struct Lazy {
  uint64_t granules = 0;
  uint64_t id = UINT64_MAX;
  uint64_t get(LoopBuilder& builder) {
    if (id == UINT64_MAX) id = builder.allocate(granules);
    return id;
  }
};

// 1 to 128 granules, even on a log scale; from the generator's bits alone, so that every
// standard library draws the same sizes.
inline uint64_t log_size(std::mt19937_64& random) {
  const double unit = static_cast<double>(random() >> 11) * 0x1.0p-53;
  return static_cast<uint64_t>(std::exp2(unit * 7.0));
}

}  // namespace detail

inline ReplayInput training_loop(const TrainingLoop& shape) {
  using detail::Lazy;
  std::mt19937_64 random(shape.seed);
  detail::LoopBuilder builder;
  struct Layer {
    uint64_t weight;
    Lazy gradient, first_moment, second_moment, pre_activation, activation;
  };
  std::vector<Layer> layers(shape.layers);
  uint64_t largest_activation = 1;
  for (Layer& layer : layers) {
    const uint64_t weight = detail::log_size(random);
    const uint64_t activation = detail::log_size(random);
    layer.weight = builder.allocate(weight);
    layer.gradient.granules = layer.first_moment.granules = layer.second_moment.granules = weight;
    layer.pre_activation.granules = layer.activation.granules = activation;
    largest_activation = std::max(largest_activation, activation);
  }
  const uint64_t batch = builder.allocate(layers.front().pre_activation.granules);
  const uint64_t targets = builder.allocate(1);
  const uint64_t workspace = shape.workspace ? builder.allocate(2) : UINT64_MAX;
  Lazy loss{.granules = 1};
  std::vector<Lazy> scratch(3, Lazy{.granules = largest_activation});
  std::vector<Lazy> loss_gradient(shape.rotating ? 3 : 1,
                                  Lazy{.granules = layers.back().activation.granules});

  const auto with_workspace = [&](std::vector<uint64_t> blocks) {
    if (shape.workspace) blocks.push_back(workspace);
    return blocks;
  };
  // A moment, zeroed by a launch of its own when it is allocated if `zeroed`.
  const auto moment = [&](Lazy& state) {
    const bool allocated = state.id == UINT64_MAX;
    const uint64_t id = state.get(builder);
    if (allocated && shape.zeroed) builder.launch({id});
    return id;
  };
  const auto input_of = [&](uint32_t layer) {
    return layer == 0 ? batch : layers[layer - 1].activation.get(builder);
  };
  for (uint32_t step = 0; step < shape.steps; ++step) {
    for (uint32_t micro = 0; micro < shape.micro_batches; ++micro) {
      for (uint32_t l = 0; l < shape.layers; ++l) {
        Layer& layer = layers[l];
        builder.launch(
            with_workspace({input_of(l), layer.weight, layer.pre_activation.get(builder)}));
        builder.launch({layer.pre_activation.get(builder), layer.activation.get(builder)});
      }
      builder.launch({layers.back().activation.get(builder), targets, loss.get(builder)});
      // The gradient coming in, the pre-activation's, the one going out.
      uint64_t in = loss_gradient[step % loss_gradient.size()].get(builder);
      const uint64_t middle = scratch[0].get(builder);
      uint64_t out = scratch[1].get(builder);
      uint64_t spare = scratch[2].get(builder);
      builder.launch({loss.get(builder), in});
      for (uint32_t l = shape.layers; l-- > 0;) {
        Layer& layer = layers[l];
        builder.launch({in, layer.pre_activation.get(builder), middle});
        builder.launch(with_workspace({middle, input_of(l), layer.gradient.get(builder)}));
        if (l == 0) break;
        builder.launch(with_workspace({middle, layer.weight, out}));
        in = out;
        std::swap(out, spare);
      }
    }
    if (!shape.foreach) {
      for (Layer& layer : layers) {
        builder.launch({layer.weight, layer.gradient.get(builder), moment(layer.first_moment),
                        moment(layer.second_moment)});
      }
      continue;
    }
    for (uint32_t first = 0; first < shape.layers; first += 4) {
      std::vector<uint64_t> moments, weights;
      for (uint32_t l = first; l < std::min(first + 4, shape.layers); ++l) {
        Layer& layer = layers[l];
        moments.insert(moments.end(), {layer.gradient.get(builder), moment(layer.first_moment),
                                       moment(layer.second_moment)});
        weights.insert(weights.end(),
                       {layer.weight, moment(layer.first_moment), moment(layer.second_moment)});
      }
      builder.launch(moments);
      builder.launch(weights);
    }
  }
  return builder.finish(shape.factor);
}

// The corpus the replay tests hold the policies to: 2 to 48 layers, 1.25 to 3 times the budget,
// each option alone and together, from fixed seeds.
inline std::vector<TrainingLoop> training_corpus() {
  const uint32_t layers[] = {2, 3, 4, 6, 8, 12, 16, 24, 32, 48};
  const double factors[] = {1.25, 1.5, 2.0, 2.5, 3.0};
  std::vector<TrainingLoop> corpus;
  uint64_t seed = 1;
  for (std::size_t i = 0; i < 30; ++i, ++seed) {
    corpus.push_back({.layers = layers[i % std::size(layers)],
                      .factor = factors[(i + i / std::size(layers)) % std::size(factors)],
                      .steps = 24,
                      .foreach = i % 2 == 1,
                      .workspace = i % 3 == 1,
                      .rotating = i % 4 >= 2,
                      .micro_batches = i % 5 == 4 ? 2u : 1u,
                      .zeroed = i % 3 == 2,
                      .seed = seed});
  }
  return corpus;
}

}  // namespace vramspill::cli::testing
