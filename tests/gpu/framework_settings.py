#!/usr/bin/env python3
"""A framework's own memory settings under vramspill on a real GPU: each runs a job three times
its budget and stays exact.

Run by ctest (label gpu) as
    python3 framework_settings.py --framework torch|jax|cupy --shim build/lib/libvramspill.so
For each setting of the framework (its allocator, as a user would configure it: the table
SETTINGS below) and each spill mode the setting is checked in, a child process runs under the
shim with a 2 GiB budget. It allocates float32 arrays of 256 MiB worth three times the budget,
fills each on the GPU, updates every one in place three times (x -> x/2 + 1, exact in float32
for these values) and checks every value on the GPU. The parent then reads the shim's exit
summary: nothing may have been refused, and something must have lived off the device (spilled
over the budget, or in tiered mode evicted to the host): a run that never left the device proves
nothing. The README's "Frameworks" table says what each setting does in each mode.

Exits 77 (ctest's "skipped") without the framework or without a CUDA device, 0 when every run
holds, 1 otherwise.
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys

SKIPPED = 77
BUDGET_GIB = 2
ARRAY_FLOATS = 64 << 20  # 256 MiB of float32
UPDATES = 3

# framework -> [(setting, environment it takes, spill modes it is checked in)]. The allocator
# a child installs itself (CuPy's) is named by FRAMEWORK_TEST_ALLOCATOR, read in the child (not
# VRAMSPILL_...: the shim refuses a VRAMSPILL_ variable it does not know, and cuInit with it).
SETTINGS = {
    "torch": [
        # The default allocator: pytorch_spill.py and pytorch_tiered.py; expandable segments:
        # pytorch_spill.py in each mode (gpu.pytorch_expandable_segments.*).
        ("backend:cudaMallocAsync",
         {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, ["auto", "tiered"]),
    ],
    "jax": [
        # One cuMemAlloc per buffer: the shim places (and in tiered mode moves) each.
        ("XLA_PYTHON_CLIENT_ALLOCATOR=platform",
         {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, ["auto", "tiered"]),
        # XLA's BFC arena, grown on demand up to 4 times what cuMemGetInfo reports (the budget).
        ("XLA_PYTHON_CLIENT_PREALLOCATE=false, XLA_PYTHON_CLIENT_MEM_FRACTION=4",
         {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": "4"},
         ["auto"]),
    ],
    "cupy": [
        ("default memory pool", {"FRAMEWORK_TEST_ALLOCATOR": "pool"}, ["auto", "tiered"]),
        ("MemoryPool(malloc_managed)", {"FRAMEWORK_TEST_ALLOCATOR": "managed"}, ["auto"]),
        ("MemoryAsyncPool", {"FRAMEWORK_TEST_ALLOCATOR": "async"}, ["auto", "tiered"]),
    ],
}


class Torch:
    def __init__(self):
        import torch
        self.torch = torch

    def full(self, value):
        return self.torch.full((ARRAY_FLOATS,), value, dtype=self.torch.float32, device="cuda")

    def update(self, array):
        return array.mul_(0.5).add_(1.0)

    def equals(self, array, value):
        return bool(self.torch.all(array == value))


class Jax:
    def __init__(self):
        import jax
        import jax.numpy as jnp
        self.jnp = jnp
        # The argument's buffer is donated, so an update reuses it as an in-place one would.
        self.step = jax.jit(lambda x: x * 0.5 + 1.0, donate_argnums=0)

    def full(self, value):
        return self.jnp.full((ARRAY_FLOATS,), value, dtype=self.jnp.float32).block_until_ready()

    def update(self, array):
        return self.step(array).block_until_ready()

    def equals(self, array, value):
        return bool(self.jnp.all(array == value))


class Cupy:
    def __init__(self):
        import cupy
        self.cupy = cupy
        allocator = os.environ.get("FRAMEWORK_TEST_ALLOCATOR", "pool")
        if allocator == "managed":
            cupy.cuda.set_allocator(cupy.cuda.MemoryPool(cupy.cuda.malloc_managed).malloc)
        elif allocator == "async":
            cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)

    def full(self, value):
        return self.cupy.full(ARRAY_FLOATS, value, dtype=self.cupy.float32)

    def update(self, array):
        array *= 0.5
        array += 1.0
        return array

    def equals(self, array, value):
        return bool((array == value).all())


FRAMEWORKS = {"torch": Torch, "jax": Jax, "cupy": Cupy}


def child(framework):
    """The job, in a child process under the shim: prints how many arrays were exact."""
    runner = FRAMEWORKS[framework]()
    count = 3 * (BUDGET_GIB << 30) // (ARRAY_FLOATS * 4)
    arrays = [runner.full(float(i % 61 + 1)) for i in range(count)]
    for _ in range(UPDATES):
        for i in range(count):
            arrays[i] = runner.update(arrays[i])
    exact = 0
    for i, array in enumerate(arrays):
        expected = float(i % 61 + 1)
        for _ in range(UPDATES):
            expected = expected * 0.5 + 1.0
        exact += runner.equals(array, expected)
    print(f"exact {exact} of {count}")
    return 0 if exact == count else 1


def sees_a_device(framework):
    """Whether the framework imports and sees a CUDA device (run in a child, without the shim)."""
    if framework == "torch":
        import torch
        return torch.cuda.is_available()
    if framework == "jax":
        import jax
        return bool(jax.devices("gpu"))
    import cupy
    return cupy.cuda.runtime.getDeviceCount() > 0


def available_or_skip(framework):
    """Exits 77 with the reason unless the framework is installed and sees a CUDA device. The
    question is asked in a child process without the shim, so that the parent holds no device
    memory (JAX would preallocate three quarters of the GPU) while the jobs run."""
    if importlib.util.find_spec(framework) is None:
        print(f"{framework} is not installed: skipped")
        sys.exit(SKIPPED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMSPILL_")}
    env.pop("LD_PRELOAD", None)
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    probe = subprocess.run([sys.executable, __file__, "--framework", framework, "--probe"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           check=False)
    if probe.returncode != 0:
        print(f"{framework} sees no CUDA device: skipped\n{probe.stdout[-2000:]}")
        sys.exit(SKIPPED)


def left_the_device(summary):
    """Whether the shim's exit summary says some bytes lived off the device, and the problems it
    shows (a refusal, or no summary at all)."""
    problems = []
    devices = re.findall(r"(\d+) over the budget, (\d+) refused", summary)
    if not devices:
        problems.append("the shim printed no exit summary: was it preloaded?")
    over = sum(int(o) for o, _ in devices)
    refused = sum(int(r) for _, r in devices)
    if refused:
        problems.append(f"the shim refused {refused} requests")
    evicted = re.search(r"tiered: ([0-9.]+) (B|KiB|MiB|GiB|TiB) evicted", summary)
    off_device = over > 0 or (evicted is not None and float(evicted.group(1)) > 0)
    if devices and not off_device:
        problems.append("nothing was spilled or evicted: the job never left the device")
    return problems


def run(framework, setting, environment, mode, shim):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMSPILL_")}
    env.update(environment, LD_PRELOAD=shim, VRAMSPILL_DEVICE_BUDGET=f"{BUDGET_GIB}GiB",
               VRAMSPILL_SPILL_MODE=mode, VRAMSPILL_SPILL_HOST_LIMIT="16GiB",
               VRAMSPILL_LOG_LEVEL="info")
    result = subprocess.run([sys.executable, __file__, "--framework", framework, "--child"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            check=False)
    summary = "\n".join(line for line in result.stderr.splitlines()
                        if re.search(r"\] info: (device \d+: peak|tiered: )", line))
    problems = [] if result.returncode == 0 else [f"the job exited {result.returncode}"]
    problems += left_the_device(summary)
    exact = re.search(r"exact \d+ of \d+", result.stdout)
    label = f"{framework}, {setting}, {mode}"
    print(f"framework_settings: {label}: {exact.group(0) if exact else 'no result'}")
    print(summary)
    for problem in problems:
        print(f"framework_settings: {label}: {problem}")
    if problems:
        print(result.stderr[-4000:])
    return not problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), required=True)
    parser.add_argument("--shim", help="libvramspill.so")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.framework)
    if args.probe:
        return 0 if sees_a_device(args.framework) else 1
    available_or_skip(args.framework)
    if not args.shim:
        parser.error("--shim is required")
    ok = True
    for setting, environment, modes in SETTINGS[args.framework]:
        for mode in modes:
            ok = run(args.framework, setting, environment, mode, args.shim) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
