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

from traced_demo import (HOST_ARGS, HOST_MODE, TIERED_ARGS, check_bad_traces, fail,
                         run_traced_demo, tiered_mode)

CLI, TRAIN_DEMO, PRELOAD, SIMCUDA_DIR, TIERED_CONF, SEGMENT_EVENTS = sys.argv[1:7]

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
        snapshot = pickle.load(f)
    entries = len(snapshot["external_annotations"])
    said = f" {entries // 2} annotation(s) ({entries} entries of external_annotations"
    if said not in result.stdout:
        fail(f"export says {result.stdout!r}, expected{said!r}")
    return events, snapshot


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
                if a["name"].startswith("vramspill: over the budget") and a["stage"] == "START"]
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


def main():
    with tempfile.TemporaryDirectory(prefix="vramspill-export-") as directory:
        check_host_mode(directory)
        tiered_trace = check_tiered_mode(directory)
        check_bad_traces(export, "vramspill export", "exporting", directory, tiered_trace,
                         "pickle")
    print("export checks passed")


if __name__ == "__main__":
    main()
