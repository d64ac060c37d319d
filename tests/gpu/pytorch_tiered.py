#!/usr/bin/env python3
"""PyTorch under vramspill's tiered mode on a real GPU: its launches are read, and a model that
arrives late takes the device from the data before it.

Run by ctest (label gpu) as
    python3 pytorch_tiered.py --shim build/lib/libvramspill.so --work DIR [--mover prefetch]
Each job runs as a child process of this script, traced ([trace] file) under the shim in tiered
mode (lru, a 2 GiB budget, the remap mover or the one --mover names):
- reads: a few training steps of an MLP with Adam. PyTorch's kernels (elementwise, the
  optimizer's, cuBLAS's GEMMs) are CUkernel handles the shim must read: the trace's launches event
  must count none unreadable, and its use events must name the block of every parameter.
- late_hot: cold tensors written once fill the budget, then a model that fits in it trains. Every
  block its parameters and optimizer state live in must end on the device (by the trace's alloc,
  evict and promote events). The step time is printed beside the same job's without the shim: a
  figure measured on this GPU, not a check.

Exits 77 (ctest's "skipped") without torch or a CUDA device, 0 when every check holds, 1
otherwise.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from torch_on_gpu import torch_or_skip

BUDGET = "2GiB"
COLD_TENSORS = 8  # of 256 MiB: the whole budget
WIDTH = 2048
LAYERS = 4  # with Adam, about 0.5 GiB of parameters, gradients and state


def build_model(torch):
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).cuda()
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def train(torch, model, optimizer, steps):
    """Trains `steps` steps; returns each step's milliseconds."""
    data = torch.randn(512, WIDTH, device="cuda")
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        model(data).square().mean().backward()
        optimizer.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def child(job):
    """A job, run in a child process; prints the addresses of its model's tensors."""
    import torch
    cold = []
    if job == "late_hot":
        for index in range(COLD_TENSORS):
            tensor = torch.empty(64 << 20, dtype=torch.float32, device="cuda")
            tensor.fill_(float(index))
            cold.append(tensor)
    model, optimizer = build_model(torch)
    times = train(torch, model, optimizer, 3 if job == "reads" else 12)
    tensors = [p for p in model.parameters()]
    tensors += [v for state in optimizer.state.values() for v in state.values()
                if torch.is_tensor(v) and v.is_cuda]
    print("model_pointers " + " ".join(hex(t.data_ptr()) for t in tensors))
    print(f"step_ms {statistics.median(times[3:] or times):.3f}")
    for index, tensor in enumerate(cold):  # written once, still exact
        if not bool(torch.all(tensor == float(index))):
            print(f"cold tensor {index} changed")
            return 1
    return 0


def run_child(job, env):
    result = subprocess.run([sys.executable, __file__, "--child", job], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            check=False)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        raise SystemExit(f"pytorch_tiered: the {job} job exited {result.returncode}")
    fields = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        fields[key] = value
    return fields


def read_trace(path):
    """The tiered blocks (base -> [size, host bytes at the end]), the use events' bases, and the
    launches event's two counts (None when the trace has none)."""
    blocks, used, launches = {}, set(), None
    with open(path, encoding="utf-8") as trace:
        for line in trace:
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            kind = words[1]
            if kind == "alloc" and words[3] == "tiered":
                blocks[int(words[4], 16)] = [int(words[5]), 0]
            elif kind == "free" and words[3] == "tiered":
                blocks.pop(int(words[4], 16), None)
            elif kind in ("evict", "promote") and int(words[3], 16) in blocks:
                sign = 1 if kind == "evict" else -1
                blocks[int(words[3], 16)][1] += sign * int(words[4])
            elif kind == "use":
                used.update(int(base, 16) for base in words[4:])
            elif kind == "launches":
                launches = (int(words[2]), int(words[3]))
    return blocks, used, launches


def block_of(blocks, pointer):
    for base, (size, _) in blocks.items():
        if base <= pointer < base + size:
            return base
    return None


def check(job, fields, trace_path):
    blocks, used, launches = read_trace(trace_path)
    pointers = [int(p, 16) for p in fields["model_pointers"].split()]
    homes = {block_of(blocks, pointer) for pointer in pointers}
    problems = []
    if None in homes:
        problems.append("some of the model's tensors lie in no tiered block")
    homes.discard(None)
    if launches is None:
        problems.append("the trace has no launches event")
    else:
        print(f"pytorch_tiered: {job}: {launches[0]} kernel launches, {launches[1]} unreadable")
        if launches[1] != 0:
            problems.append(f"{launches[1]} launches could not be read")
    if job == "reads":
        unnamed = [hex(base) for base in homes if base not in used]
        if unnamed:
            problems.append("no launch named the model's blocks " + ", ".join(unnamed))
    else:
        on_host = [hex(base) for base in homes if blocks[base][1] > 0]
        if on_host:
            problems.append("the model's blocks " + ", ".join(on_host) + " ended on the host")
    for problem in problems:
        print(f"pytorch_tiered: {job}: {problem}")
    return not problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shim", help="libvramspill.so")
    parser.add_argument("--work", help="a directory for the traces")
    parser.add_argument("--mover", choices=["remap", "prefetch"], default="remap",
                        help="[tiered] mover (default remap)")
    parser.add_argument("--child", choices=["reads", "late_hot"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    torch_or_skip()
    if not args.shim or not args.work:
        parser.error("--shim and --work are required")
    os.makedirs(args.work, exist_ok=True)
    plain = {k: v for k, v in os.environ.items() if not k.startswith("VRAMSPILL_")}
    plain.pop("LD_PRELOAD", None)
    ok = True
    step_ms = {}
    for job in ("reads", "late_hot"):
        trace_path = os.path.join(args.work, f"{job}.trace")
        shimmed = dict(plain, LD_PRELOAD=args.shim, VRAMSPILL_DEVICE_BUDGET=BUDGET,
                       VRAMSPILL_SPILL_MODE="tiered", VRAMSPILL_TIERED_POLICY="lru",
                       VRAMSPILL_TIERED_MOVER=args.mover, VRAMSPILL_SPILL_HOST_LIMIT="16GiB",
                       VRAMSPILL_TRACE_FILE=trace_path)
        fields = run_child(job, shimmed)
        ok = check(job, fields, trace_path) and ok
        step_ms[job] = float(fields["step_ms"])
    alone = float(run_child("late_hot", plain)["step_ms"])
    print(f"pytorch_tiered: late_hot step (median, measured): {step_ms['late_hot']:.2f} ms under "
          f"the shim (tiered, lru, {args.mover} mover, {BUDGET}), {alone:.2f} ms without it: "
          f"{step_ms['late_hot'] / alone:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
