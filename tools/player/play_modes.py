#!/usr/bin/env python3
"""Plays a vramspill trace with the workload player under the shim, once per placement mode and
tiered policy, and prints one table: the time per step and the bytes each run moved. On simcuda
(--simcuda) every figure comes from its cost model: modeled, never measured. On a GPU
(--system-driver, with the real kernel) the time is measured and the link columns are unknown.

    play_modes.py --player build/bin/workload_player --simcuda build/simcuda \\
        --shim build/lib/libvramspill.so --budget 3GiB --vram 141GiB TRACE [-- PLAYER_OPTIONS]
    play_modes.py --player build/bin/workload_player --system-driver \\
        --kernels build/simcuda/vs_kernels.fatbin --shim build/lib/libvramspill.so \\
        --budget 3GiB TRACE [-- PLAYER_OPTIONS]

Runs: the player without the shim (every block on the device; needs --vram above the trace's
blocks), then `host` and `managed` mode, then `tiered` mode with each policy (--runs picks
some), once with each mover --mover names (`remap`, the default, and `prefetch`: README, "The
prefetch mover"; the row says which). Columns:
  ms/step    the player's modeled_ms_per_step (on a GPU measured_ms_per_step): the mean of the
             played steps after the first
  evicted    bytes tiered mode moved to the host while the player played (from the shim's
  promoted   [trace] file, up to the player's play_end_unix_ns: the final verification's moves
             are left out); blank in the other modes, which move nothing
  in place   bytes kernels and memsets read or wrote across the link (simcuda's
             link_bytes_zero_copy: host-mode blocks, evicted granules reached in place;
             "-" with --system-driver, where only simcuda could count them)
  migrated   managed pages moved either way (simcuda's link_bytes_migrations; "-" likewise)
  host s     the player's host time (simcuda runs kernels on the CPU: what a run costs here)
Each run must verify every byte and see no remap violation; a run that does not is shown as
FAILED, and the script exits 1 after the table. With --system-driver the player uses whatever
libcuda.so.1 the loader finds (NVIDIA's, or simcuda's if LD_LIBRARY_PATH names it), and the line
under the table says whether the times were measured or modeled.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

POLICIES = ["lru", "lfu", "largest", "fifo", "learned"]
MOVERS = ["remap", "prefetch"]
RUNS = ["no-shim", "host", "managed"] + [f"tiered-{policy}" for policy in POLICIES]
UNITS = ["B", "KiB", "MiB", "GiB", "TiB"]


def human(count):
    value, unit = float(count), 0
    while value >= 1024 and unit < len(UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.1f} {UNITS[unit]}"


def environment(args, run, mover, directory):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("VRAMSPILL_", "SIMCUDA_"))}
    if args.simcuda:
        env.update({"LD_LIBRARY_PATH": args.simcuda, "SIMCUDA_VRAM": args.vram,
                    "SIMCUDA_STATS": os.path.join(directory, "stats.json"),
                    "SIMCUDA_REMAP_VIOLATIONS": "report"})
    if run == "no-shim":
        return env
    mode, _, policy = run.partition("-")
    env.update({"LD_PRELOAD": args.shim, "VRAMSPILL_DEVICE_BUDGET": args.budget,
                "VRAMSPILL_DEVICE_RESERVE": "0", "VRAMSPILL_SPILL_MODE": mode,
                "VRAMSPILL_SPILL_HOST_LIMIT": args.host_limit, "VRAMSPILL_LOG_LEVEL": "warn",
                "VRAMSPILL_LOG_STATS": "false",
                "VRAMSPILL_TRACE_FILE": os.path.join(directory, "shim.trace")})
    if policy:
        env.update({"VRAMSPILL_TIERED_POLICY": policy, "VRAMSPILL_TIERED_WINDOW": args.window,
                    "VRAMSPILL_TIERED_MOVER": mover})
    return env


def moves_during_play(trace_path, play_end_unix_ns):
    """Bytes evicted and promoted by the shim before the player's play ended."""
    moved = {"evict": 0, "promote": 0}
    if not os.path.exists(trace_path):
        return None
    start = 0
    with open(trace_path) as trace:
        for line in trace:
            words = line.split()
            if line.startswith("# start_unix_ns"):
                start = int(words[2])
            elif len(words) == 5 and words[1] in moved and start + int(words[0]) < play_end_unix_ns:
                moved[words[1]] += int(words[4])
    return moved


def link_bytes(directory):
    """simcuda's count of the bytes crossing the link in place and by migration; None on a
    driver that keeps no such count."""
    stats_path = os.path.join(directory, "stats.json")
    if not os.path.exists(stats_path):
        return None
    with open(stats_path) as stats_file:
        device = json.load(stats_file)["devices"][0]
    return {"in_place": device["link_bytes_zero_copy"],
            "migrated": device["link_bytes_migrations"]}


def play(args, run, mover):
    kernels = ["--kernels", args.kernels] if args.kernels else []
    with tempfile.TemporaryDirectory(prefix="play_modes.") as directory:
        try:
            result = subprocess.run([args.player, args.trace, "--quiet", *kernels,
                                     *args.player_options],
                                    env=environment(args, run, mover, directory),
                                    capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired as expired:
            output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                             for part in (expired.stdout, expired.stderr) if part)
            return {"problem": f"stopped after {args.timeout:g} s (--timeout)", "output": output}
        output = result.stdout + result.stderr
        step = re.search(r"^(modeled|measured)_ms_per_step ([0-9.]+)", result.stdout,
                         re.MULTILINE)
        end = re.search(r"^play_end_unix_ns ([0-9]+)$", result.stdout, re.MULTILINE)
        seconds = re.search(r"in ([0-9.]+) s of host time", result.stdout)
        problem = None
        if result.returncode != 0 or step is None or end is None:
            problem = f"exit status {result.returncode}"
        elif "remap violation" in result.stderr:
            problem = "simcuda saw a remap violation"
        if problem:
            return {"problem": problem, "output": output}
        return {"ms": float(step.group(2)), "timing": step.group(1),
                "seconds": float(seconds.group(1)),
                "moved": moves_during_play(os.path.join(directory, "shim.trace"),
                                           int(end.group(1))),
                "link": link_bytes(directory)}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--player", required=True, help="build/bin/workload_player")
    driver = parser.add_mutually_exclusive_group(required=True)
    driver.add_argument("--simcuda", help="simcuda's directory (libcuda.so.1)")
    driver.add_argument("--system-driver", action="store_true",
                        help="play on the libcuda.so.1 the loader finds (a GPU's driver); pass "
                             "--kernels too")
    parser.add_argument("--kernels", help="the real vs_touch kernel for a GPU "
                                          "(build/simcuda/vs_kernels.fatbin), given to the player")
    parser.add_argument("--shim", required=True, help="libvramspill.so (or the LD_PRELOAD list)")
    parser.add_argument("--budget", required=True, help="VRAMSPILL_DEVICE_BUDGET, e.g. 3GiB")
    parser.add_argument("--vram", default="141GiB",
                        help="SIMCUDA_VRAM (default 141GiB; with --simcuda only)")
    parser.add_argument("--host-limit", default="16GiB",
                        help="VRAMSPILL_SPILL_HOST_LIMIT (default 16GiB)")
    parser.add_argument("--window", default="safe", choices=["safe", "tracked"],
                        help="VRAMSPILL_TIERED_WINDOW (default safe)")
    parser.add_argument("--mover", action="append", choices=MOVERS,
                        help="VRAMSPILL_TIERED_MOVER of the tiered runs (repeatable: each tiered "
                             "run once per mover; default remap)")
    parser.add_argument("--runs", default=",".join(RUNS),
                        help=f"which runs, comma-separated (default {','.join(RUNS)})")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("trace")
    parser.add_argument("player_options", nargs="*",
                        help="after --: options for the player, e.g. --play-steps 3")
    args = parser.parse_args()
    runs = args.runs.split(",")
    unknown = [run for run in runs if run not in RUNS]
    if unknown:
        parser.error(f"unknown run {unknown[0]!r}: expected some of {', '.join(RUNS)}")
    movers = args.mover or ["remap"]
    # Each tiered run once per mover, named by it where that is not the default alone.
    plays = [(run, mover, f"{run}/{mover}" if mover and movers != ["remap"] else run)
             for run in runs for mover in (movers if run.startswith("tiered") else [None])]

    driver = (f"SIMCUDA_VRAM={args.vram}, times and bytes modeled by simcuda, not measured"
              if args.simcuda else "the system's driver")
    print(f"{args.trace}: budget {args.budget}, {args.window} window, "
          f"player options {args.player_options or 'none'}; {driver}")
    print(f"  {'run':<24} {'ms/step':>10} {'evicted':>11} {'promoted':>11} {'in place':>11} "
          f"{'migrated':>11} {'host s':>7}")
    failed = False
    timings = set()
    for run, mover, name in plays:
        row = play(args, run, mover)
        if "problem" in row:
            failed = True
            print(f"  {name:<24} FAILED: {row['problem']}\n" +
                  "\n".join("    " + line for line in row["output"].splitlines()[-15:]))
            continue
        timings.add(row["timing"])
        moved = row["moved"]
        evicted, promoted = ((human(moved["evict"]), human(moved["promote"]))
                             if moved and run.startswith("tiered") else ("", ""))
        link = row["link"]
        in_place, migrated = ((human(link["in_place"]), human(link["migrated"])) if link
                              else ("-", "-"))
        print(f"  {name:<24} {row['ms']:10.3f} {evicted:>11} {promoted:>11} "
              f"{in_place:>11} {migrated:>11} {row['seconds']:7.1f}", flush=True)
    if args.system_driver and timings:
        print("ms/step: " + " and ".join(
            {"measured": "measured on the GPU (the player's measured_ms_per_step)",
             "modeled": "modeled, not measured: the driver the loader found is simcuda"}[timing]
            for timing in sorted(timings)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
