#!/usr/bin/env python3
"""Runs policy_workloads under the shim on simcuda, in `managed` mode and in `tiered` mode with
each eviction policy, records a trace of one tiered run of each workload and replays it with
`vramspill replay`, and prints one table per workload: each policy's modeled time per step
(simcuda's cost model: modeled, not measured), the bytes the replay moves each way, its in-place
uses and what it fetched as a multiple of Belady's MIN. Fails when a run does not verify its data
or reports a remap violation, and on the --check-* options, which hold the `learned` policy to
figures on the training workload at 1.5x the budget.

    compare_policies.py --simcuda DIR --shim LIB --cli VRAMSPILL [--budget SIZE] [--steps N]
                        [--only WORKLOAD:FACTOR]... [--check-learned-ratio X] [--check-learned-vs-lru R]
                        [--check-learned-vs-managed R] -- POLICY_WORKLOADS
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

WORKLOADS = [("training", 1.5), ("training", 3.0), ("inference", 1.5), ("random", 1.5)]
CHECKED = ("training", 1.5)  # the workload the --check-* options are about
POLICIES = ["lru", "lfu", "largest", "fifo", "learned"]
TRACED = "lru"  # the policy whose run is traced; the launches are the same under every policy
SIZE = r"[0-9.]+ [KMGT]?i?B"
# policy, fetched, vs MIN, (link, vs MIN-ip: not read), promoted, evicted, moves, stops, late,
# in place.
REPLAY_ROW = re.compile(rf"^\s+(\S+)\s+({SIZE})\s+([0-9.]+)x\s+{SIZE}\s+[0-9.]+x\s+({SIZE})"
                        rf"\s+({SIZE})\s+(\d+)\s+(\d+)\s+(\d+ / \d+)\s+(\d+) / ({SIZE})$")
MIN_ROW = re.compile(rf"^\s+MIN\s+({SIZE})\s+1\.00x\s*$")


def settings(args, mode, policy=None, trace=None):
    """The environment of one run: the shim on simcuda, nothing inherited from VRAMSPILL_* or
    SIMCUDA_*."""
    changed = {"LD_LIBRARY_PATH": args.simcuda, "LD_PRELOAD": args.shim,
               "SIMCUDA_VRAM": "256MiB", "SIMCUDA_DEVICES": "1",
               "SIMCUDA_REMAP_VIOLATIONS": "report",
               "VRAMSPILL_DEVICE_BUDGET": args.budget, "VRAMSPILL_SPILL_MODE": mode,
               "VRAMSPILL_SPILL_HOST_LIMIT": "1GiB", "VRAMSPILL_LOG_LEVEL": "info"}
    if policy is not None:
        changed.update({"VRAMSPILL_TIERED_POLICY": policy, "VRAMSPILL_TIERED_KEEP": "0"})
    if trace is not None:
        changed["VRAMSPILL_TRACE_FILE"] = trace
    return changed


def command(args, workload, factor):
    return [args.workload, workload, "--factor", str(factor), "--steps", str(args.steps)]


def run_logged(args, workload, factor, mode, policy=None, trace=None, extra=None):
    """Modeled ms per step and the shim's log of one run, whose data verified; `extra`: more
    VRAMSPILL_* settings."""
    inherited = {key: value for key, value in os.environ.items()
                 if not key.startswith(("VRAMSPILL_", "SIMCUDA_"))}
    environment = dict(inherited, **settings(args, mode, policy, trace), **(extra or {}))
    result = subprocess.run(command(args, workload, factor), env=environment,
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    found = re.search(r"^modeled_ms_per_step ([0-9.]+)$", result.stdout, re.MULTILINE)
    what = f"{workload} at {factor}x, {policy or mode}"
    if result.returncode != 0 or found is None:
        sys.exit(f"FAIL: {what}: exit status {result.returncode}\n{output}")
    for bad in ("remap violation", "[vramspill] error"):
        if bad in output:
            sys.exit(f"FAIL: {what}: the output has '{bad}'\n{output}")
    return float(found.group(1)), result.stderr


def run(args, workload, factor, mode, policy=None, trace=None):
    """Modeled ms per step, the bytes tiered mode moved (in, out; its exit summary) and what
    learned logged, of one run."""
    ms, log = run_logged(args, workload, factor, mode, policy, trace)
    learned = re.findall(r"tiered policy learned on device 0: (.*)$", log, re.MULTILINE)
    moved = re.search(rf"tiered: ({SIZE}) evicted to the host .*, ({SIZE}) promoted to the device",
                      log)
    return ms, moved and (moved.group(2), moved.group(1)), learned


def replay(args, trace):
    """Policy -> (promoted, evicted, in-place uses, in-place bytes, vs MIN), and MIN's fetched."""
    policies = [word for policy in POLICIES for word in ("--policy", policy)]
    result = subprocess.run([args.cli, "replay", trace, *policies], capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        sys.exit(f"FAIL: vramspill replay: exit status {result.returncode}\n{result.stderr}")
    rows = {}
    optimum = None
    for line in result.stdout.splitlines():
        if found := REPLAY_ROW.match(line):
            name, _, ratio, promoted, evicted, _, stops, late, uses, in_place = found.groups()
            rows[name] = (promoted, evicted, int(uses), in_place, float(ratio), int(stops), late)
        elif found := MIN_ROW.match(line):
            optimum = found.group(1)
    if set(rows) != set(POLICIES) or optimum is None:
        sys.exit(f"FAIL: vramspill replay printed no row for some policy:\n{result.stdout}")
    return rows, optimum


def print_header(args):
    example = settings(args, "tiered", "learned", "TRACE")
    print(f"Eviction policies on simcuda workloads, budget {args.budget}, {args.steps} steps "
          f"(the first, which places the blocks, not timed).")
    print("ms/step is simcuda's cost model (modeled, not measured); promoted, evicted, in place "
          "(uses / bytes) and fetched vs MIN (Belady's optimum) are `vramspill replay` of the "
          f"{TRACED} run's trace; the last column is what each run's exit summary says it moved. "
          "Reproduce one run and the replay with:")
    environment = " ".join(f"{key}={shlex.quote(value)}" for key, value in example.items())
    print(f"  {environment} \\\n    {shlex.join(command(args, 'training', 1.5))}")
    print("  (VRAMSPILL_SPILL_MODE=managed and no VRAMSPILL_TIERED_* for the managed row)")
    print(f"  {args.cli} replay TRACE " + " ".join(f"--policy {p}" for p in POLICIES))


def compare(args, directory, workload, factor):
    """Prints the workload's table; each policy's (ms per step, vs MIN), and managed's ms."""
    managed, _, _ = run(args, workload, factor, "managed")
    trace = os.path.join(directory, f"{workload}-{factor}.trace")
    times = {}
    moved = {}
    learned_log = []
    for policy in POLICIES:
        times[policy], moved[policy], log = run(args, workload, factor, "tiered", policy,
                                                trace if policy == TRACED else None)
        if policy == "learned":
            learned_log = log
    rows, optimum = replay(args, trace)
    print(f"\n{workload} at {factor}x the budget:")
    print(f"  {'policy':<9} {'ms/step':>9} {'promoted':>11} {'evicted':>11} {'stops':>6} "
          f"{'late':>11} {'in place':>17} {'fetched vs MIN':>14}   "
          f"{'the run moved (in / out)':>24}")
    print(f"  {'managed':<9} {managed:9.3f} {'-':>11} {'-':>11} {'-':>6} {'-':>11} {'-':>17} "
          f"{'-':>14}")
    for policy in POLICIES:
        promoted, evicted, uses, in_place, ratio, stops, late = rows[policy]
        run_moved = " / ".join(moved[policy]) if moved[policy] else "?"
        print(f"  {policy:<9} {times[policy]:9.3f} {promoted:>11} {evicted:>11} {stops:>6} "
              f"{late:>11} {f'{uses} / {in_place}':>17} {f'{ratio:.2f}x':>14}   "
              f"{run_moved:>24}")
    print(f"  MIN fetches {optimum}; learned logged: {'; '.join(learned_log) or 'nothing'}")
    return {policy: (times[policy], rows[policy][4]) for policy in POLICIES}, managed


def check(args, results, managed):
    """The --check-* options, on the training workload at 1.5x."""
    learned_time, learned_ratio = results["learned"]
    failures = []
    if args.check_learned_ratio is not None and learned_ratio > args.check_learned_ratio:
        failures.append(f"learned fetched {learned_ratio:.2f}x MIN, more than "
                        f"{args.check_learned_ratio}x")
    for other, time, most in (("lru", results["lru"][0], args.check_learned_vs_lru),
                              ("managed", managed, args.check_learned_vs_managed)):
        if most is not None and learned_time > most * time:
            failures.append(f"learned took {learned_time:.3f} ms a step, more than {most} of "
                            f"{other}'s {time:.3f} ms")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simcuda", required=True, help="simcuda's directory (libcuda.so.1)")
    parser.add_argument("--shim", required=True, help="libvramspill.so (or the LD_PRELOAD list)")
    parser.add_argument("--cli", required=True, help="the vramspill command-line tool")
    parser.add_argument("--budget", default="64MiB", help="VRAMSPILL_DEVICE_BUDGET (64MiB)")
    parser.add_argument("--steps", type=int, default=8, help="steps of each run (8)")
    parser.add_argument("--only", action="append", metavar="WORKLOAD:FACTOR",
                        help="run this workload only (repeatable; default: "
                             + ", ".join(f"{w}:{f}" for w, f in WORKLOADS) + ")")
    parser.add_argument("--check-learned-ratio", type=float, metavar="X",
                        help="fail when learned fetches more than X times MIN (training, 1.5x)")
    parser.add_argument("--check-learned-vs-lru", type=float, metavar="R",
                        help="fail when learned's modeled step takes more than R times lru's "
                             "(training, 1.5x)")
    parser.add_argument("--check-learned-vs-managed", type=float, metavar="R",
                        help="fail when learned's modeled step takes more than R times managed "
                             "mode's (training, 1.5x)")
    parser.add_argument("workload", help="the policy_workloads program")
    args = parser.parse_args()
    chosen = WORKLOADS
    if args.only:
        chosen = [(w, f) for w, f in WORKLOADS if f"{w}:{f}" in args.only]
        if len(chosen) != len(args.only):
            parser.error(f"--only takes {', '.join(f'{w}:{f}' for w, f in WORKLOADS)}")
    print_header(args)
    failures = []
    with tempfile.TemporaryDirectory() as directory:
        for workload, factor in chosen:
            results, managed = compare(args, directory, workload, factor)
            if (workload, factor) == CHECKED:
                failures = check(args, results, managed)
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))


if __name__ == "__main__":
    main()
