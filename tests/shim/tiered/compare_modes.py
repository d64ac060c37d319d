#!/usr/bin/env python3
"""Runs hot_set_workload under the shim on simcuda in `host` and `tiered` mode and prints the
modeled time of each (simcuda's cost model: modeled, not measured). Fails unless the workload
verifies in both modes and tiered mode's modeled time is at most --max-ratio of host mode's.

    compare_modes.py --simcuda DIR --shim LIB --max-ratio 0.25 -- WORKLOAD
"""
import argparse
import os
import re
import subprocess
import sys


def run(mode, args):
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("VRAMSPILL_", "SIMCUDA_"))}
    environment.update({
        "LD_LIBRARY_PATH": args.simcuda, "LD_PRELOAD": args.shim,
        "SIMCUDA_VRAM": "256MiB", "SIMCUDA_DEVICES": "1",
        "VRAMSPILL_DEVICE_BUDGET": "64MiB", "VRAMSPILL_SPILL_MODE": mode,
        "VRAMSPILL_SPILL_HOST_LIMIT": "1GiB", "VRAMSPILL_SPILL_HOST_POOL_STEP": "256MiB",
        "VRAMSPILL_LOG_LEVEL": "warn"})
    result = subprocess.run(args.workload, env=environment, capture_output=True, text=True,
                            timeout=300)
    found = re.search(r"^modeled_ms ([0-9.]+)$", result.stdout, re.MULTILINE)
    if result.returncode != 0 or found is None:
        sys.exit(f"{mode} mode: exit status {result.returncode}\n{result.stdout}{result.stderr}")
    summary = [line for line in result.stderr.splitlines() if "tiered:" in line]
    return float(found.group(1)), summary


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simcuda", required=True, help="simcuda's directory (libcuda.so.1)")
    parser.add_argument("--shim", required=True, help="libvramspill.so (or the LD_PRELOAD list)")
    parser.add_argument("--max-ratio", type=float, required=True,
                        help="the most tiered mode's modeled time may be of host mode's")
    parser.add_argument("workload", nargs="+")
    args = parser.parse_args()
    host, _ = run("host", args)
    tiered, summary = run("tiered", args)
    print("hot-set workload, modeled by simcuda (not measured):")
    print(f"  host mode   {host:10.3f} ms")
    print(f"  tiered mode {tiered:10.3f} ms  ({tiered / host:.3f} of host mode)")
    for line in summary:
        print("  " + line)
    if tiered > args.max_ratio * host:
        sys.exit(f"tiered mode took {tiered / host:.3f} of host mode's modeled time, "
                 f"more than {args.max_ratio}")


if __name__ == "__main__":
    main()
