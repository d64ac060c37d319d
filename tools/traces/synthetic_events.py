#!/usr/bin/env python3
"""Write a synthetic segment-level allocation trace in segment_events.py's format, for the pool
benchmark (tests/shim/tiers/pool_replay_bench.cpp) and its smoke tests.

    synthetic_events.py [--seed N] [--steps N] [--streams N] > events.txt

The traces in ../shared/traces have one stream, no segment above a few hundred MiB and no
empty_cache(); other programs have all three, and that is where a pool of separately pinned
regions fragments (Note [Regions of their own for large blocks] in shim/tiers/host_pool.h).
This models what a driver-level shim sees under PyTorch's caching allocator in such a program:
- weights: segments allocated first and never freed;
- each step, on each stream: a few large segments (0.7 to 2 GiB, activations of a long
  context), some PyTorch-sized ones (2, 20, 26, 100 MiB, and odd multiples of 2 MiB), and frees
  of some of that stream's earlier segments (the cache giving blocks back under pressure);
- every few steps an empty_cache() burst: every segment that holds no live tensor is freed
  at once (all but the weights and a few held segments), and the next steps grow again with
  other sizes.
Deterministic for a given seed (Python's random.Random). Sizes are multiples of 2 MiB, as
PyTorch's segments are.
"""

import argparse
import random
import sys

MiB = 1 << 20
GiB = 1 << 30
# Raw cudaStream_t values, as the snapshots record them (0: the default stream).
STREAM_HANDLES = [0, 0x5a1e0f0, 0x5a1e3b0, 0x5a1e670, 0x5a1e930, 0x5a1ebf0]


def round_to_segment(size):
    return (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)


def segment_size(rng):
    """One segment: mostly PyTorch's usual sizes, sometimes a large activation."""
    pick = rng.random()
    if pick < 0.12:
        return round_to_segment(rng.randint(7 * GiB // 10, 2 * GiB))
    if pick < 0.40:
        return 2 * MiB
    if pick < 0.60:
        return 20 * MiB
    if pick < 0.70:
        return 26 * MiB
    if pick < 0.82:
        return 100 * MiB
    return round_to_segment(rng.randint(4 * MiB, 600 * MiB))


def generate(seed, steps, streams, weights_bytes, live_target, burst_every):
    rng = random.Random(seed)
    handles = STREAM_HANDLES[:streams]
    out = []
    live = {}  # id -> (bytes, stream)
    next_id = 0

    def allocate(size, stream):
        nonlocal next_id
        out.append(f"a {next_id} {size} {stream}")
        live[next_id] = (size, stream)
        next_id += 1
        return next_id - 1

    def free(block):
        out.append(f"f {block} {live.pop(block)[1]}")

    weights = set()
    total = 0
    while total < weights_bytes:
        size = rng.choice([100 * MiB, 200 * MiB, 26 * MiB, round_to_segment(rng.randint(MiB, GiB))])
        weights.add(allocate(size, handles[0]))
        total += size

    held = set()  # segments that survive the next burst (a tensor still lives in them)
    for step in range(1, steps + 1):
        for stream in rng.sample(handles, len(handles)):
            live_bytes = sum(size for size, _ in live.values())
            # Grow towards the target, then churn around it.
            wanted = rng.randint(3, 12) if live_bytes < live_target else rng.randint(1, 4)
            for _ in range(wanted):
                block = allocate(segment_size(rng), stream)
                if rng.random() < 0.05:
                    held.add(block)
            mine = [b for b, (_, s) in live.items() if s == stream and b not in weights]
            frees = rng.randint(0, len(mine) // 3) if live_bytes >= live_target else 0
            for block in rng.sample(mine, frees):
                held.discard(block)
                free(block)
        if step % burst_every == 0:
            out.append(f"# empty_cache() after step {step}")
            for block in [b for b in live if b not in weights and b not in held]:
                free(block)
            held = {b for b in held if rng.random() < 0.5}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--streams", type=int, default=4, choices=range(1, len(STREAM_HANDLES) + 1))
    parser.add_argument("--weights-gib", type=float, default=6.0)
    parser.add_argument("--live-gib", type=float, default=24.0,
                        help="live bytes the steps grow to before they also free")
    parser.add_argument("--burst-every", type=int, default=8,
                        help="steps between empty_cache() bursts")
    args = parser.parse_args()
    lines = generate(args.seed, args.steps, args.streams, int(args.weights_gib * GiB),
                     int(args.live_gib * GiB), args.burst_every)
    out = sys.stdout
    out.write(f"# vramspill pool events v2: synthetic_events.py --seed {args.seed} "
              f"--steps {args.steps} --streams {args.streams} --weights-gib {args.weights_gib} "
              f"--live-gib {args.live_gib} --burst-every {args.burst_every}\n")
    out.write("\n".join(lines))
    out.write("\n")


if __name__ == "__main__":
    main()
