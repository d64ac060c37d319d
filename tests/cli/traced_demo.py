"""What the end-to-end tests of trace tools share: the demo run under the shim on simcuda with a
[trace] file, and failing with a message."""

import os
import subprocess
import sys

# Tiered mode, small enough to take a few seconds: 48 MiB through a 32 MiB budget, one step.
TIERED_ARGS = ["--bytes", "48MiB", "--chunk", "4MiB", "--steps", "1"]


def tiered_mode(tiered_conf):
    return {"VRAMSPILL_CONFIG": tiered_conf, "VRAMSPILL_DEVICE_BUDGET": "32MiB"}


def fail(message):
    sys.exit(f"FAIL: {message}")


def run_traced_demo(train_demo, preload, simcuda_dir, directory, name, mode, args):
    """Runs the demo with `args` and the VRAMSPILL_* settings `mode`; the path of its trace."""
    trace = os.path.join(directory, f"{name}.trace")
    env = dict(os.environ, LD_LIBRARY_PATH=simcuda_dir, SIMCUDA_VRAM="256MiB",
               LD_PRELOAD=preload, VRAMSPILL_TRACE_FILE=trace, **mode)
    job = subprocess.run([train_demo, *args], env=env, capture_output=True, text=True)
    if job.returncode != 0:
        fail(f"the {name} job exited {job.returncode}:\n{job.stdout}{job.stderr}")
    return trace
