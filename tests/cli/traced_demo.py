"""What the end-to-end tests of the trace tools share: the demo run under the shim on simcuda
with a [trace] file, the checks every tool that reads a trace must pass on bad input, and failing
with a message."""

import os
import subprocess
import sys

# Spills to the pinned host pool: 3x a 64 MiB budget, in 16 MiB blocks.
HOST_MODE = {"VRAMSPILL_SPILL_MODE": "host", "VRAMSPILL_DEVICE_BUDGET": "64MiB",
             "VRAMSPILL_SPILL_HOST_LIMIT": "512MiB", "VRAMSPILL_SPILL_HOST_POOL_STEP": "128MiB"}
HOST_ARGS = ["--chunk", "16MiB"]
# Tiered mode, small enough to take a few seconds: 48 MiB through a 32 MiB budget, one step.
TIERED_ARGS = ["--bytes", "48MiB", "--chunk", "4MiB", "--steps", "1"]


def tiered_mode(tiered_conf):
    return {"VRAMSPILL_CONFIG": tiered_conf, "VRAMSPILL_DEVICE_BUDGET": "32MiB"}


def fail(message):
    sys.exit(f"FAIL: {message}")


def run_traced_demo(train_demo, preload, simcuda_dir, directory, name, mode, args):
    """Runs the demo with `args` and the VRAMSPILL_* settings `mode` (and none inherited); the
    path of its trace."""
    trace = os.path.join(directory, f"{name}.trace")
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("VRAMSPILL_")}
    env = dict(inherited, LD_LIBRARY_PATH=simcuda_dir, SIMCUDA_VRAM="256MiB",
               LD_PRELOAD=preload, VRAMSPILL_TRACE_FILE=trace, **mode)
    job = subprocess.run([train_demo, *args], env=env, capture_output=True, text=True)
    if job.returncode != 0:
        fail(f"the {name} job exited {job.returncode}:\n{job.stdout}{job.stderr}")
    return trace


def check_bad_traces(run_tool, program, doing, directory, trace, extension):
    """`run_tool(trace, output)` on `trace` cut short (as by a job killed while writing: no
    "# end", half a line) must warn that `program` goes on `doing` what it holds; on a damaged
    trace it must fail with status 2 and one line naming the line, leaving an existing output
    alone; an output that cannot be written is status 1, leaving no temporary file. The output
    written from the cut-short trace."""
    with open(trace) as f:
        lines = f.readlines()
    cut = os.path.join(directory, "cut.trace")
    with open(cut, "w") as f:
        f.writelines(lines[:-3])
        f.write(lines[-3][:7])
    cut_output = os.path.join(directory, f"cut.{extension}")
    result = run_tool(cut, cut_output)
    warning = (f"{program}: {cut} ends without '# end': the process was killed or its trace "
               f"stopped; {doing} what it holds\n")
    if result.returncode != 0 or result.stderr != warning:
        fail(f"a cut-short trace: status {result.returncode}, stderr {result.stderr!r}")

    damaged = os.path.join(directory, "damaged.trace")
    with open(damaged, "w") as f:
        f.writelines(lines[:6] + ["123 allocate 0 tiered 0x1000 4096\n"] + lines[6:])
    output = os.path.join(directory, f"damaged.{extension}")
    with open(output, "w") as f:
        f.write("left alone")
    result = run_tool(damaged, output)
    if result.returncode != 2 or result.stderr.count("\n") != 1 or \
            f"{damaged}:7: unknown event kind 'allocate'" not in result.stderr:
        fail(f"a damaged trace: status {result.returncode}, stderr {result.stderr!r}")
    with open(output) as f:
        if f.read() != "left alone":
            fail(f"a failed {program} changed the output file")

    result = run_tool(trace, os.path.join(directory, "no-such-dir", f"out.{extension}"))
    if result.returncode != 1 or "cannot write" not in result.stderr:
        fail(f"an unwritable output: status {result.returncode}, stderr {result.stderr!r}")
    leftovers = [n for n in os.listdir(directory) if f".{extension}." in n]
    if leftovers:
        fail(f"temporary files left behind: {leftovers}")
    return cut_output
