#!/usr/bin/env python3
"""Run the real CUDA runtime on simcuda and check every driver entry point it resolves.

Runs the cudart probe with simcuda first on LD_LIBRARY_PATH and SIMCUDA_LOOKUP_LOG set, then
compares each logged cuGetProcAddress(_v2) lookup with the table of what the real driver answers
(tests/data/cudart-13.0.88-driver-lookups.txt). Fails when:
  - the probe does not exit 0 (it exits 0 even when cudaMalloc fails, as it does on simcuda);
  - fewer than 300 lookups were logged (cudart 13.0 makes about 440);
  - cudart did not look up cuGetProcAddress itself at 11030 and at 12000;
  - a logged (name, version, flags) is in the table with a different export.
Lookups the table does not list (another cudart version) are reported, not failed.
"""

import argparse
import os
import re
import subprocess
import sys

LINE = re.compile(r'^(cuGetProcAddress(?:_v2)?)\("([^"]*)", ver=(-?\d+), flags=(\d+)\) -> (.+)$')


def parse(path):
    """[(entry point, (name, version, flags), export)] from a lookup log or the table."""
    lookups = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            match = LINE.match(line)
            if not match:
                sys.exit(f"{path}:{number}: unrecognised line: {line!r}")
            entry, name, version, flags, export = match.groups()
            lookups.append((entry, (name, int(version), int(flags)), export))
    return lookups


def run_probe(probe, driver_dir, log):
    if os.path.exists(log):
        os.remove(log)  # the log is appended to
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [driver_dir, env.get("LD_LIBRARY_PATH")]))
    env["SIMCUDA_LOOKUP_LOG"] = log
    try:
        result = subprocess.run([probe], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: {probe} did not finish within 120 s")
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        sys.exit(f"FAIL: {probe} exited with {result.returncode}")
    if not os.path.exists(log):
        sys.exit("FAIL: no lookup was logged: did cudart load simcuda's libcuda.so.1?")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", required=True, help="the nvcc-built cudart program")
    parser.add_argument("--driver-dir", required=True, help="directory of simcuda's libcuda.so.1")
    parser.add_argument("--table", required=True, help="expected lookups (tests/data/...)")
    parser.add_argument("--log", required=True, help="where simcuda writes its lookup log")
    args = parser.parse_args()

    run_probe(args.probe, args.driver_dir, args.log)
    logged = parse(args.log)
    expected = {key: export for _, key, export in parse(args.table)}

    failures = []
    if len(logged) < 300:
        failures.append(f"only {len(logged)} lookups logged; cudart 13.0 makes about 440")
    for version in (11030, 12000):
        if not any(key[0] == "cuGetProcAddress" and key[1] == version for _, key, _ in logged):
            failures.append(f"cudart did not look up cuGetProcAddress at {version}")

    unlisted = []
    for entry, key, export in logged:
        name, version, flags = key
        if key not in expected:
            unlisted.append(f"{entry}({name!r}, ver={version}, flags={flags}) -> {export}")
        elif expected[key] != export:
            failures.append(f"{name!r} ver={version} flags={flags}: simcuda answered {export}, "
                            f"the driver answers {expected[key]}")

    print(f"{len(logged)} lookups logged, {len(logged) - len(unlisted)} of them in the table")
    for line in unlisted:
        print(f"note: not in the table: {line}")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
