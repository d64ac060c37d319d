#!/usr/bin/env python3
"""Runs policy_workloads under the shim on simcuda in `managed` mode and in `tiered` mode with
each mover ([tiered] mover = "remap" and "prefetch") and the chosen policies, and prints one table
per workload: modeled ms per step (simcuda's cost model: modeled, not measured) and the bytes
each run's exit summary says it moved in and out. Fails when a run does not verify its data,
reports a remap violation, or (prefetch) shows a remap window or a prefetch the driver refused;
--check-prefetch-vs-managed R fails when a prefetch run's modeled step on any workload takes more
than R times managed mode's, --check-learned-training R when learned's prefetch run on a training
workload does.

    compare_movers.py --simcuda DIR --shim LIB [--cli VRAMSPILL] [--budget SIZE] [--steps N] [--policy P]...
                      [--only WORKLOAD:FACTOR]... [--check-prefetch-vs-managed R]
                      [--check-learned-training R] -- POLICY_WORKLOADS
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

from compare_policies import SIZE, WORKLOADS, command, run_logged, settings

MOVERS = ["remap", "prefetch"]
REMAP_MOVED = re.compile(rf"tiered: ({SIZE}) evicted to the host .*, ({SIZE}) promoted to the device")
PREFETCH_MOVED = re.compile(rf"prefetch mover: ({SIZE}) promoted in \d+ prefetches, ({SIZE}) evicted"
                            rf" in \d+ prefetches \(\d+ in part\), .* (\d+) prefetches the driver"
                            rf" refused")
WINDOWS = re.compile(r" (\d+) remap windows ")
RECORDED = re.compile(rf"^\s+recorded\s+({SIZE})\s+({SIZE})\s*$", re.MULTILINE)


def moved(mover, log, what):
    """(in, out) as the exit summary says; fails a prefetch run that remapped or was refused."""
    if mover == "remap":
        found = REMAP_MOVED.search(log)
        return (found.group(2), found.group(1)) if found else ("?", "?")
    found = PREFETCH_MOVED.search(log)
    windows = WINDOWS.search(log)
    if found is None or windows is None:
        sys.exit(f"FAIL: {what}: no prefetch mover summary\n{log}")
    if found.group(3) != "0" or windows.group(1) != "0":
        sys.exit(f"FAIL: {what}: {found.group(3)} prefetches refused, {windows.group(1)} remap "
                 f"windows\n{log}")
    return found.group(1), found.group(2)


def replayed(args, trace, what):
    """The moves `vramspill replay` reads in the prefetch run's trace (in, out), or fails."""
    result = subprocess.run([args.cli, "replay", trace, "--policy", args.policy[0]],
                            capture_output=True, text=True, timeout=120)
    found = RECORDED.search(result.stdout)
    if result.returncode != 0 or found is None:
        sys.exit(f"FAIL: {what}: vramspill replay of its trace: exit status {result.returncode}\n"
                 f"{result.stdout}{result.stderr}")
    return found.group(1), found.group(2)


def compare(args, workload, factor, directory):
    """Prints the workload's table; returns managed's ms and each (mover, policy)'s ms."""
    managed, _ = run_logged(args, workload, factor, "managed")
    print(f"\n{workload} at {factor}x the budget (managed mode: {managed:.3f} ms/step):")
    print(f"  {'policy':<9} {'mover':<9} {'ms/step':>9} {'vs managed':>11} "
          f"{'moved in / out':>24}")
    times = {}
    for policy in args.policy:
        for mover in MOVERS:
            what = f"{workload} at {factor}x, {policy}, {mover}"
            traced = args.cli is not None and mover == "prefetch" and policy == args.policy[0]
            trace = os.path.join(directory, f"{workload}-{factor}.trace") if traced else None
            ms, log = run_logged(args, workload, factor, "tiered", policy, trace,
                                 extra={"VRAMSPILL_TIERED_MOVER": mover})
            moved_in, moved_out = moved(mover, log, what)
            # Out differs by design: the trace tells each new block as evicted right after its
            # allocation (it starts on the host), which moves nothing.
            if traced and (recorded := replayed(args, trace, what))[0] != moved_in:
                sys.exit(f"FAIL: {what}: its trace records {recorded[0]} promoted, its summary "
                         f"{moved_in}")
            times[(mover, policy)] = ms
            print(f"  {policy:<9} {mover:<9} {ms:9.3f} {ms / managed:10.2f}x "
                  f"{f'{moved_in} / {moved_out}':>24}")
    return managed, times


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simcuda", required=True, help="simcuda's directory (libcuda.so.1)")
    parser.add_argument("--shim", required=True, help="libvramspill.so (or the LD_PRELOAD list)")
    parser.add_argument("--budget", default="64MiB", help="VRAMSPILL_DEVICE_BUDGET (64MiB)")
    parser.add_argument("--steps", type=int, default=8, help="steps of each run (8)")
    parser.add_argument("--policy", action="append", help="a policy to run (repeatable; lru)")
    parser.add_argument("--cli", help="the vramspill command: the first policy's prefetch run is "
                                      "traced, and the promotions `vramspill replay` reads in "
                                      "the trace must be those its exit summary counts")
    parser.add_argument("--only", action="append", metavar="WORKLOAD:FACTOR",
                        help="run this workload only (repeatable; default: "
                             + ", ".join(f"{w}:{f}" for w, f in WORKLOADS) + ")")
    parser.add_argument("--check-prefetch-vs-managed", type=float, metavar="R",
                        help="fail when a prefetch run's modeled step on any workload takes "
                             "more than R times managed mode's")
    parser.add_argument("--check-learned-training", type=float, metavar="R",
                        help="fail when learned's prefetch run on a training workload takes "
                             "more than R times managed mode's step (needs --policy learned)")
    parser.add_argument("workload", help="the policy_workloads program")
    args = parser.parse_args()
    args.policy = args.policy or ["lru"]
    if args.check_learned_training is not None and "learned" not in args.policy:
        parser.error("--check-learned-training needs --policy learned")
    chosen = WORKLOADS
    if args.only:
        chosen = [(w, f) for w, f in WORKLOADS if f"{w}:{f}" in args.only]
        if len(chosen) != len(args.only):
            parser.error(f"--only takes {', '.join(f'{w}:{f}' for w, f in WORKLOADS)}")
    example = dict(settings(args, "tiered", args.policy[0]), VRAMSPILL_TIERED_MOVER="prefetch")
    print(f"Tiered movers on simcuda workloads, budget {args.budget}, {args.steps} steps (the "
          "first, which places the blocks, not timed). ms/step is simcuda's cost model (modeled, "
          "not measured); moved is each run's exit summary. Reproduce the prefetch run with:")
    environment = " ".join(f"{key}={shlex.quote(value)}" for key, value in example.items())
    print(f"  {environment} \\\n    {shlex.join(command(args, *chosen[0]))}")
    failures = []
    with tempfile.TemporaryDirectory() as directory:
        for workload, factor in chosen:
            failures += compare_and_check(args, workload, factor, directory)
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))


def compare_and_check(args, workload, factor, directory):
    """The workload's table, and what the --check-* options find wrong in it."""
    managed, times = compare(args, workload, factor, directory)
    limits = []  # (policy, R)
    if args.check_prefetch_vs_managed is not None:
        limits += [(policy, args.check_prefetch_vs_managed) for policy in args.policy]
    if args.check_learned_training is not None and workload == "training":
        limits.append(("learned", args.check_learned_training))
    failures = []
    for policy, limit in limits:
        ms = times[("prefetch", policy)]
        if ms > limit * managed:
            failures.append(f"{workload} at {factor}x: {policy} with the prefetch mover took "
                            f"{ms:.3f} ms a step, more than {limit} of managed's {managed:.3f}")
    return failures


if __name__ == "__main__":
    main()
