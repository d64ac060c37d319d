#!/usr/bin/env python3
"""Runs a workload under the shim on simcuda in two configurations and prints the modeled time
of each (simcuda's cost model: modeled, not measured). Fails unless the workload verifies in both,
simcuda saw no remap violation, and the candidate's modeled time is at most --max-ratio of the
baseline's. By default the baseline is `host` mode and the candidate `tiered` mode; --baseline and
--candidate (VARIABLE=VALUE, repeatable) replace them. --expect REGEX (repeatable) must match what
each run printed; --within-budget fails a run in which simcuda's device memory ever exceeded the
device budget (its peak_device_bytes against VRAMSPILL_DEVICE_BUDGET, a size).

    compare_modes.py --simcuda DIR --shim LIB --max-ratio 0.25 -- WORKLOAD
    compare_modes.py --simcuda DIR --shim LIB --max-ratio 0.7 \\
        --baseline VRAMSPILL_SPILL_MODE=tiered --baseline VRAMSPILL_TIERED_WINDOW=safe \\
        --candidate VRAMSPILL_SPILL_MODE=tiered --candidate VRAMSPILL_TIERED_WINDOW=tracked \\
        -- WORKLOAD
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def run(settings, args):
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("VRAMSPILL_", "SIMCUDA_"))}
    environment.update({
        "LD_LIBRARY_PATH": args.simcuda, "LD_PRELOAD": args.shim,
        "SIMCUDA_VRAM": "256MiB", "SIMCUDA_DEVICES": "1", "SIMCUDA_REMAP_VIOLATIONS": "report",
        "VRAMSPILL_DEVICE_BUDGET": "64MiB", "VRAMSPILL_SPILL_HOST_LIMIT": "1GiB",
        "VRAMSPILL_SPILL_HOST_POOL_STEP": "256MiB", "VRAMSPILL_LOG_LEVEL": "warn"})
    environment.update(settings)
    label = " ".join(f"{key}={value}" for key, value in settings.items())
    with tempfile.TemporaryDirectory() as directory:
        stats = os.path.join(directory, "simcuda.json")
        environment["SIMCUDA_STATS"] = stats
        result = subprocess.run(args.workload, env=environment, capture_output=True, text=True,
                                timeout=300)
        found = re.search(r"^modeled_ms ([0-9.]+)$", result.stdout, re.MULTILINE)
        if result.returncode != 0 or found is None:
            sys.exit(f"{label}: exit status {result.returncode}\n{result.stdout}{result.stderr}")
        if args.within_budget:
            check_budget(label, stats, environment["VRAMSPILL_DEVICE_BUDGET"])
    if "remap violation" in result.stderr:
        sys.exit(f"{label}: simcuda saw a remap violation\n{result.stderr}")
    for pattern in args.expect or []:
        if not re.search(pattern, result.stdout + result.stderr, re.MULTILINE):
            sys.exit(f"{label}: nothing matched {pattern!r}\n{result.stdout}{result.stderr}")
    # The shim's exit summary: what tiered mode moved, and each device's routes and spills.
    summary = [line for line in result.stderr.splitlines()
               if "tiered:" in line or " over the budget, " in line]
    return float(found.group(1)), summary


def check_budget(label, stats, budget):
    """Fails unless every device's peak, as simcuda charged it, stayed within `budget`."""
    size = re.fullmatch(r"([0-9]+)(|KiB|MiB|GiB)", budget)
    if size is None:
        sys.exit(f"--within-budget needs a budget in bytes, KiB, MiB or GiB, not {budget!r}")
    limit = int(size.group(1)) * UNITS[size.group(2)]
    with open(stats, encoding="utf-8") as file:
        devices = json.load(file)["devices"]
    for device in devices:
        if device["peak_device_bytes"] > limit:
            sys.exit(f"{label}: device {device['ordinal']} held {device['peak_device_bytes']} "
                     f"bytes at its peak, past the budget of {limit}")


def settings(assignments, default):
    pairs = [assignment.split("=", 1) for assignment in assignments or default]
    if any(len(pair) != 2 for pair in pairs):
        sys.exit(f"expected VARIABLE=VALUE, got {assignments}")
    return dict(pairs)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simcuda", required=True, help="simcuda's directory (libcuda.so.1)")
    parser.add_argument("--shim", required=True, help="libvramspill.so (or the LD_PRELOAD list)")
    parser.add_argument("--max-ratio", type=float, required=True,
                        help="the most the candidate's modeled time may be of the baseline's")
    parser.add_argument("--baseline", action="append", metavar="VARIABLE=VALUE",
                        help="the baseline's settings (default VRAMSPILL_SPILL_MODE=host)")
    parser.add_argument("--candidate", action="append", metavar="VARIABLE=VALUE",
                        help="the candidate's settings (default VRAMSPILL_SPILL_MODE=tiered)")
    parser.add_argument("--expect", action="append", metavar="REGEX",
                        help="a pattern each run's output must match (repeatable)")
    parser.add_argument("--within-budget", action="store_true",
                        help="fail a run whose device memory ever exceeded the device budget")
    parser.add_argument("workload", nargs="+")
    args = parser.parse_args()
    baseline = settings(args.baseline, ["VRAMSPILL_SPILL_MODE=host"])
    candidate = settings(args.candidate, ["VRAMSPILL_SPILL_MODE=tiered"])
    baseline_ms, baseline_summary = run(baseline, args)
    candidate_ms, candidate_summary = run(candidate, args)
    print(f"{os.path.basename(args.workload[0])}, modeled by simcuda (not measured):")
    for label, modeled, summary in (("baseline ", baseline_ms, baseline_summary),
                                    ("candidate", candidate_ms, candidate_summary)):
        chosen = settings_of(baseline if label.startswith("baseline") else candidate)
        print(f"  {label} {modeled:10.3f} ms  {chosen}")
        for line in summary:
            print("    " + line)
    print(f"  candidate / baseline: {candidate_ms / baseline_ms:.3f}")
    if candidate_ms > args.max_ratio * baseline_ms:
        sys.exit(f"the candidate took {candidate_ms / baseline_ms:.3f} of the baseline's modeled "
                 f"time, more than {args.max_ratio}")


def settings_of(chosen):
    return " ".join(f"{key}={value}" for key, value in chosen.items())


if __name__ == "__main__":
    main()
