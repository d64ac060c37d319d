#!/usr/bin/env python3
"""Tests of tools/traces/segment_events.py on small snapshots made here (the project's tests never
read ../shared/traces): stream identity is kept, and a snapshot with nothing for the requested
device is an error naming the devices present instead of an empty event list."""

import pickle
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "traces" / "segment_events.py"
MIB = 1 << 20


def snapshot_on(device):
    """One segment live at dump time on `device` (allocated on stream 7 before the trace), and a
    trace on it: a block allocated and freed on stream 9, another allocated on stream 0."""
    traces = [[] for _ in range(device + 1)]
    traces[device] = [
        {"action": "segment_alloc", "addr": 0x2000, "size": 4 * MIB, "stream": 9},
        {"action": "segment_free", "addr": 0x2000, "size": 4 * MIB, "stream": 9},
        {"action": "segment_alloc", "addr": 0x3000, "size": 2 * MIB, "stream": 0},
    ]
    segments = [
        {"device": device, "address": 0x1000, "total_size": 20 * MIB, "stream": 7, "blocks": []},
        {"device": device, "address": 0x3000, "total_size": 2 * MIB, "stream": 0, "blocks": []},
    ]
    return {"segments": segments, "device_traces": traces}


def run(snapshot, *args):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "snapshot.pickle"
        path.write_bytes(pickle.dumps(snapshot))
        return subprocess.run([sys.executable, str(SCRIPT), str(path), *args],
                              capture_output=True, text=True, check=False)


def event_lines(stdout):
    return [line for line in stdout.splitlines() if not line.startswith("#")]


class SegmentEvents(unittest.TestCase):
    def test_events_keep_their_streams(self):
        result = run(snapshot_on(0))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(event_lines(result.stdout), [
            f"a 0 {20 * MIB} 7",  # live before the trace, on the segment's stream
            f"a 1 {4 * MIB} 9",
            "f 1 9",
            f"a 2 {2 * MIB} 0",
        ])

    def test_another_devices_snapshot_is_an_error_naming_the_devices(self):
        result = run(snapshot_on(1))  # --device defaults to 0
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stdout, "")
        self.assertIn("nothing recorded for device 0; devices present: 1", result.stderr)

    def test_the_requested_device_is_read(self):
        result = run(snapshot_on(1), "--device", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(event_lines(result.stdout)), 4)

    def test_an_empty_snapshot_names_no_device(self):
        result = run({"segments": [], "device_traces": []})
        self.assertEqual(result.returncode, 2)
        self.assertIn("devices present: none", result.stderr)


if __name__ == "__main__":
    unittest.main()
