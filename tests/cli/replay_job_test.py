#!/usr/bin/env python3
"""`vramspill replay` on a real trace: the demo runs in tiered mode (lru) under the shim on
simcuda with a [trace] file. Replayed with lru at the job's budget, the model of tiered mode
(tools/cli/trace_replay.h) must move exactly what the job moved; every policy must fetch at
least Belady's MIN, and move over the link at least MIN-ip's bound; a smaller budget must not
fetch less. A trace without tiered blocks, a
budget below one granule or above the device, and an unknown policy are errors (status 2), each
named as what it is; a budget may be a percentage of the device's memory. The same job traced with [trace] format =
"binary" replays alike, cut short it warns likewise, and `vramspill export` reads it too.

    replay_job_test.py CLI TRAIN_DEMO PRELOAD SIMCUDA_DIR TIERED_CONF
"""

import os
import subprocess
import sys
import tempfile

from traced_demo import TIERED_ARGS, fail, run_traced_demo, tiered_mode

CLI, TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, TIERED_CONF = sys.argv[1:6]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size(text):
    number, unit = text.split()
    return round(float(number) * UNITS[unit])


def replay(*args):
    return subprocess.run([CLI, "replay", *args], capture_output=True, text=True)


def table(output):
    """Row name -> its sizes, from replay's table ("fetched link promoted evicted in-place", as
    present)."""
    rows = {}
    for line in output.splitlines()[2:]:
        words = line.split()
        sizes = []
        i = 1
        while i < len(words):
            if i + 1 < len(words) and words[i + 1] in UNITS:
                sizes.append(size(f"{words[i]} {words[i + 1]}"))
                i += 2
            else:
                i += 1
        rows[words[0]] = sizes
    return rows


def check_recorded_moves(rows):
    """lru at the job's budget moves what the job moved, and the job moved something."""
    lru_promoted, lru_evicted = rows["lru"][2:4]
    recorded_promoted, recorded_evicted = rows["recorded"]
    if (lru_promoted, lru_evicted) != (recorded_promoted, recorded_evicted):
        fail(f"lru replayed at the job's budget moved {lru_promoted} in and {lru_evicted} out; "
             f"the job moved {recorded_promoted} and {recorded_evicted}")
    if recorded_evicted == 0:
        fail("the job evicted nothing: the test's budget no longer makes it move blocks")


def check_binary_trace(directory):
    """The tiered job traced in the binary format: the tools read it as they read text."""
    trace = run_traced_demo(TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, directory, "tiered-binary",
                            dict(tiered_mode(TIERED_CONF), VRAMSPILL_TRACE_FORMAT="binary"),
                            TIERED_ARGS)
    with open(trace, "rb") as f:
        first_line = f.readline()
    if first_line != b"# vramspill binary trace 1\n":
        fail(f"VRAMSPILL_TRACE_FORMAT=binary wrote a trace starting {first_line[:40]!r}")
    result = replay(trace)
    if result.returncode != 0 or result.stderr:
        fail(f"replay of a binary trace: status {result.returncode}\n{result.stderr}")
    check_recorded_moves(table(result.stdout))
    cut = os.path.join(directory, "cut-binary.trace")
    with open(trace, "rb") as whole, open(cut, "wb") as f:
        f.write(whole.read()[:-3])
    result = replay(cut)
    warning = (f"vramspill replay: {cut} ends without its end record: the process was killed or "
               f"its trace stopped; replaying what it holds\n")
    if result.returncode != 0 or result.stderr != warning:
        fail(f"a cut-short binary trace: status {result.returncode}, stderr {result.stderr!r}")
    snapshot = os.path.join(directory, "tiered-binary.pickle")
    exported = subprocess.run([CLI, "export", "--format", "memory-viz", trace, "-o", snapshot],
                              capture_output=True, text=True)
    if exported.returncode != 0 or exported.stderr or not os.path.getsize(snapshot):
        fail(f"export of a binary trace: status {exported.returncode}\n{exported.stderr}")


def main():
    with tempfile.TemporaryDirectory() as directory:
        trace = run_traced_demo(TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, directory, "tiered",
                                tiered_mode(TIERED_CONF), TIERED_ARGS)
        result = replay(trace)
        if result.returncode != 0:
            fail(f"replay: status {result.returncode}\n{result.stderr}")
        rows = table(result.stdout)
        print(result.stdout)
        check_recorded_moves(rows)
        lru_fetched = rows["lru"][0]
        (optimum,) = rows["MIN"]
        (link_optimum,) = rows["MIN-ip"]
        for policy in ("fifo", "largest", "lfu", "lru"):
            if rows[policy][0] < optimum:
                fail(f"{policy} fetched {rows[policy][0]}, less than MIN's {optimum}")
        for policy in ("fifo", "largest", "learned", "lfu", "lru"):
            if rows[policy][1] < link_optimum:
                fail(f"{policy} moved {rows[policy][1]} over the link, less than MIN-ip's "
                     f"{link_optimum}")
        smaller = table(replay(trace, "--budget", "16MiB", "--policy", "lru").stdout)
        if smaller["lru"][0] < lru_fetched:
            fail(f"lru fetched less at 16 MiB ({smaller['lru'][0]}) than at 32 MiB ({lru_fetched})")

        host_trace = run_traced_demo(TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, directory, "host",
                                     {"VRAMSPILL_SPILL_MODE": "host",
                                      "VRAMSPILL_DEVICE_BUDGET": "32MiB",
                                      "VRAMSPILL_SPILL_HOST_LIMIT": "256MiB"}, TIERED_ARGS)
        refused = replay(host_trace)
        if refused.returncode != 2 or "no tiered block on device 0" not in refused.stderr:
            fail(f"a host-mode trace: status {refused.returncode}\n{refused.stderr}")
        # Each bad option is named as what it is, never blamed on the trace.
        for args, said in ((("--budget", "1MiB"), "--budget '1MiB': expected at least 2MiB"),
                           (("--budget", "2TiB"), "--budget '2TiB': more than device 0's "),
                           (("--budget", "lots"), "--budget 'lots': expected a size such as"),
                           (("--policy", "bogus"), "--policy 'bogus': no such policy (valid: ")):
            wrong = replay(trace, *args)
            if wrong.returncode != 2 or said not in wrong.stderr:
                fail(f"{' '.join(args)}: status {wrong.returncode}\n{wrong.stderr}")
        # A percentage is of the device's memory, which the trace records.
        half = replay(trace, "--budget", "50%", "--policy", "lru")
        if half.returncode != 0 or "budget 128.0 MiB" not in half.stdout:
            fail(f"--budget 50%: status {half.returncode}\n{half.stdout}{half.stderr}")
        check_binary_trace(directory)
    print("replay checks passed")


if __name__ == "__main__":
    main()
