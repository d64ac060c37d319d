#!/usr/bin/env python3
"""`vramspill export --format memory-viz` on real traces: the demo runs under the shim on
simcuda with a [trace] file, once spilling to the host pool and once in tiered mode; the export
must load with tools/traces/segment_events.py (both levels) with every allocation the trace
holds, spilled allocations' frames must carry vramspill's mark, and each eviction must be an
annotation. Then a trace cut short exports with a warning, a damaged one fails with its line,
and a failed export leaves no file behind.

    export_job_test.py CLI TRAIN_DEMO PRELOAD SIMCUDA_DIR TIERED_CONF SEGMENT_EVENTS
"""

import os
import pickle
import subprocess
import sys
import tempfile

from traced_demo import TIERED_ARGS, fail, run_traced_demo, tiered_mode

CLI, TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, TIERED_CONF, SEGMENT_EVENTS = sys.argv[1:7]

# Spills to the pinned host pool: 3x a 64 MiB budget, in 16 MiB blocks.
HOST_MODE = {"VRAMSPILL_SPILL_MODE": "host", "VRAMSPILL_DEVICE_BUDGET": "64MiB",
             "VRAMSPILL_SPILL_HOST_LIMIT": "512MiB", "VRAMSPILL_SPILL_HOST_POOL_STEP": "128MiB"}
HOST_ARGS = ["--chunk", "16MiB"]
TIERED_MODE = tiered_mode(TIERED_CONF)


def run_job(directory, name, mode, args):
    return run_traced_demo(TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, directory, name, mode, args)


def export(trace, output):
    return subprocess.run([CLI, "export", "--format", "memory-viz", trace, "-o", output],
                          capture_output=True, text=True)


def trace_events(trace):
    """The trace's event lines, split."""
    with open(trace) as f:
        return [line.split() for line in f if not line.startswith("#")]


def check_segment_events(snapshot_path, allocations):
    for level in ("segments", "blocks"):
        listed = subprocess.run([sys.executable, SEGMENT_EVENTS, "--level", level, snapshot_path],
                                capture_output=True, text=True)
        if listed.returncode != 0:
            fail(f"segment_events.py --level {level} failed:\n{listed.stderr}")
        allocated = sum(line.startswith("a ") for line in listed.stdout.splitlines())
        if allocated != allocations:
            fail(f"segment_events.py --level {level} lists {allocated} allocations, the trace "
                 f"holds {allocations}")


def exported(directory, name, mode, args):
    """Runs a job, exports its trace and checks it with segment_events.py; the trace's events
    and the snapshot."""
    trace = run_job(directory, name, mode, args)
    snapshot_path = os.path.join(directory, f"{name}.pickle")
    result = export(trace, snapshot_path)
    if result.returncode != 0 or result.stderr:
        fail(f"export of the {name} trace: status {result.returncode}\n{result.stderr}")
    events = trace_events(trace)
    check_segment_events(snapshot_path, sum(e[1] == "alloc" for e in events))
    with open(snapshot_path, "rb") as f:
        return events, pickle.load(f)


def check_host_mode(directory):
    events, snapshot = exported(directory, "host", HOST_MODE, HOST_ARGS)
    spilled = {int(e[4], 16) for e in events if e[1] == "alloc" and e[3] == "spill-host"}
    on_device = {int(e[4], 16) for e in events if e[1] == "alloc" and e[3] == "cuMemAlloc"}
    if not spilled or not on_device:
        fail(f"the host-mode job should spill some blocks and keep others: {events}")
    for event in snapshot["device_traces"][0]:
        name = event["frames"][0]["name"]
        if event["addr"] in spilled and name != \
                "vramspill: spilled to pinned host memory (spill-host)":
            fail(f"a spilled allocation's event lacks the mark: {event}")
        if event["addr"] in on_device and name != "device memory (cuMemAlloc)":
            fail(f"a device allocation's event is marked {name!r}")
    refusals = [a for a in snapshot["external_annotations"]
                if a["name"].startswith("vramspill: refused") and a["stage"] == "START"]
    if len(refusals) != sum(e[1] == "refuse" for e in events):
        fail(f"one annotation per refusal expected: {snapshot['external_annotations']}")


def check_tiered_mode(directory):
    events, snapshot = exported(directory, "tiered", TIERED_MODE, TIERED_ARGS)
    evictions = [e for e in events if e[1] == "evict"]
    if not evictions:
        fail("the tiered job should evict")
    names = [a["name"] for a in snapshot["external_annotations"] if a["stage"] == "START"]
    evicted = [n for n in names if n.startswith("vramspill: evicted ")]
    if len(evicted) != len(evictions):
        fail(f"{len(evictions)} evictions in the trace, {len(evicted)} annotations")
    first = evictions[0]
    if not any(n.endswith(f" of {first[3]} to the host") for n in evicted):
        fail(f"no annotation names the block at {first[3]}: {evicted[:3]}")
    if not any(n.startswith("vramspill: promoted ") for n in names):
        fail("no promotion annotations")
    for event in snapshot["device_traces"][0]:
        if not event["frames"][0]["name"].startswith("vramspill: tiered block"):
            fail(f"a tiered allocation's event lacks the mark: {event}")
    return os.path.join(directory, "tiered.trace")


def check_cut_short_and_damaged(directory, trace):
    with open(trace) as f:
        lines = f.readlines()
    # A job killed while writing: no "# end", and half a line.
    cut = os.path.join(directory, "cut.trace")
    with open(cut, "w") as f:
        f.writelines(lines[:-3])
        f.write(lines[-3][:7])
    result = export(cut, os.path.join(directory, "cut.pickle"))
    warning = (f"vramspill export: {cut} ends without '# end': the process was killed or its "
               "trace stopped; exporting what it holds\n")
    if result.returncode != 0 or result.stderr != warning:
        fail(f"a cut-short trace: status {result.returncode}, stderr {result.stderr!r}")

    damaged = os.path.join(directory, "damaged.trace")
    with open(damaged, "w") as f:
        f.writelines(lines[:6] + ["123 allocate 0 tiered 0x1000 4096\n"] + lines[6:])
    output = os.path.join(directory, "damaged.pickle")
    with open(output, "w") as f:
        f.write("left alone")
    result = export(damaged, output)
    if result.returncode != 2 or result.stderr.count("\n") != 1 or \
            f"{damaged}:7: unknown event kind 'allocate'" not in result.stderr:
        fail(f"a damaged trace: status {result.returncode}, stderr {result.stderr!r}")
    with open(output) as f:
        if f.read() != "left alone":
            fail("a failed export changed the output file")

    result = export(trace, os.path.join(directory, "no-such-dir", "out.pickle"))
    if result.returncode != 1 or "cannot write" not in result.stderr:
        fail(f"an unwritable output: status {result.returncode}, stderr {result.stderr!r}")
    leftovers = [n for n in os.listdir(directory) if ".pickle." in n]
    if leftovers:
        fail(f"temporary files left behind: {leftovers}")


def main():
    with tempfile.TemporaryDirectory(prefix="vramspill-export-") as directory:
        check_host_mode(directory)
        tiered_trace = check_tiered_mode(directory)
        check_cut_short_and_damaged(directory, tiered_trace)
    print("export checks passed")


if __name__ == "__main__":
    main()
