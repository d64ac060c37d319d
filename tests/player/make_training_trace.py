#!/usr/bin/env python3
"""Writes a small vramspill text trace (shim/telemetry/trace_format.h) shaped like a training job
recorded in tiered mode, for the workload player's tests (they must not depend on recorded files).

Each layer has a weight, its gradient and two optimizer states, allocated once; each step
allocates the layer's activation (at the address it had last step, as a caching allocator hands
it back), runs forward and backward on the legacy default stream (trace stream 0), frees the
activations, and runs the optimizer on a stream of its own over groups of layers, one launch
naming 4 blocks per layer, as a framework's multi-tensor kernels do. One small block whose size
is not a multiple of 8 is used every step. Evictions and promotions are written too, as the
recording shim would have; the player must leave them out. Every launch of a step repeats in
the next, so the player finds the steps.

    make_training_trace.py OUT [--layers N] [--block SIZE_MIB] [--steps N] [--group N]
"""
import argparse

MIB = 1 << 20
BASE = 0x7F0000000000
OPTIMIZER_STREAM = 0x55AA00001000  # a stream the job created (a CUstream's value)
SMALL_BYTES = 1003


class Trace:
    def __init__(self):
        self.lines = []
        self.time = 1000

    def event(self, text):
        self.time += 1000
        self.lines.append(f"{self.time} {text}")

    def alloc(self, key, size):
        self.event(f"alloc 0 tiered {key:#x} {size}")

    def free(self, key, size):
        self.event(f"free 0 tiered {key:#x} {size}")

    def use(self, stream, *keys):
        self.event(f"use 0 {stream} " + " ".join(f"{key:#x}" for key in keys))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--block", type=int, default=4, help="MiB per block")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--group", type=int, default=2, help="layers per optimizer launch")
    args = parser.parse_args()
    size = args.block * MIB
    stride = size + 2 * MIB  # room between blocks, as a shim's ranges have
    keys = iter(BASE + i * stride for i in range(10 ** 6))
    weights, grads, first_moments, second_moments, activations = (
        [next(keys) for _ in range(args.layers)] for _ in range(5))
    small = next(keys)

    trace = Trace()
    trace.event(f"device 0 {64 << 30} {len(weights) * size}")
    for layer in range(args.layers):
        for block in (weights, grads, first_moments, second_moments):
            trace.alloc(block[layer], size)
    trace.alloc(small, SMALL_BYTES)
    for step in range(args.steps):
        for layer in range(args.layers):
            trace.alloc(activations[layer], size)
            previous = activations[layer - 1] if layer else small
            trace.use(0, weights[layer], previous, activations[layer])
        if step:  # what the recording shim did; the player leaves it out
            trace.event(f"evict 0 {weights[0]:#x} {size}")
            trace.event(f"promote 0 {weights[0]:#x} {size}")
        for layer in reversed(range(args.layers)):
            trace.use(0, activations[layer], weights[layer], grads[layer])
            trace.free(activations[layer], size)
        for first in range(0, args.layers, args.group):
            group = range(first, min(first + args.group, args.layers))
            trace.use(OPTIMIZER_STREAM, *(block[layer] for layer in group
                                          for block in (weights, grads, first_moments,
                                                        second_moments)))
        trace.use(0, small)
    with open(args.out, "w") as out:
        out.write("# vramspill trace 1\n# pid 1\n# start_unix_ns 0\n"
                  "# command make_training_trace.py\n")
        out.write("\n".join(trace.lines) + "\n")
        out.write(f"# end {len(trace.lines)} events\n")


if __name__ == "__main__":
    main()
