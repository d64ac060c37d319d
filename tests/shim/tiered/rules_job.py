#!/usr/bin/env python3
"""[[tiered.rule]] end to end: rules_program under the shim on simcuda in tiered mode (16 MiB
budget, lru, the --mover given: remap by default), with a policy file whose rules pin the blocks librule_allocator.so allocates (a
library pattern, matched on the allocating call stack) and keep 6 MiB blocks on the host (a size
range). Its [trace] file must show the pinned block never evicted and the host block never
promoted, while lru evicts the program's own blocks; the exit summary counts each rule's
matches. A control run whose library pattern names no loaded library must see the same block
evicted, so the check can fail. A last run finds a libunwind.so.8 without unw_backtrace first
on the library path (--no-unwinder-directory): the log must say once that library patterns
cannot match, the pinned block is then evicted like any other, and the size rule still holds.

    rules_job.py --simcuda DIR --shim LIB --program rules_program --directory DIR \
        --no-unwinder-directory DIR [--mover remap|prefetch]
"""
import argparse
import os
import re
import subprocess
import sys


def fail(message):
    sys.exit(f"FAIL: {message}")


def run(args, name, library_pattern, library_path=None, allowed=()):
    policy = os.path.join(args.directory, f"{name}.toml")
    with open(policy, "w") as f:
        # admission: the prefetch mover makes every promotion lru asks for, as the remap mover
        # does, so that lru evicts the program's blocks, each used a few times, with either.
        f.write(f'[spill]\nmode = "tiered"\n\n[tiered]\npolicy = "lru"\nkeep = "0"\n'
                f'mover = "{args.mover}"\nadmission = "always"\n\n'
                f'[[tiered.rule]]\naction = "pin"\nlibrary = "{library_pattern}"\n\n'
                '[[tiered.rule]]\naction = "prefer_host"\nmin_size = "6MiB"\nmax_size = "6MiB"\n')
    trace = os.path.join(args.directory, f"{name}.trace")
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("VRAMSPILL_", "SIMCUDA_"))}
    environment.update({
        "LD_LIBRARY_PATH": library_path or args.simcuda, "LD_PRELOAD": args.shim,
        "SIMCUDA_VRAM": "64MiB",
        "SIMCUDA_DEVICES": "1", "SIMCUDA_REMAP_VIOLATIONS": "report",
        "VRAMSPILL_CONFIG": policy, "VRAMSPILL_DEVICE_BUDGET": "16MiB",
        "VRAMSPILL_SPILL_HOST_LIMIT": "256MiB", "VRAMSPILL_TRACE_FILE": trace,
        "VRAMSPILL_LOG_LEVEL": "info", "VRAMSPILL_LOG_SUMMARY": "true"})
    job = subprocess.run([args.program], env=environment, capture_output=True, text=True,
                         timeout=120)
    output = job.stdout + job.stderr
    if job.returncode != 0 or "every byte checked" not in job.stdout:
        fail(f"{name}: rules_program exited {job.returncode}:\n{output}")
    for bad in ("remap violation", "[vramspill] error", "cannot match"):
        if bad in output and bad not in allowed:
            fail(f"{name}: the job printed '{bad}':\n{output}")
    bases = dict(re.findall(r"^(library|host) block (0x[0-9a-f]+)$", job.stdout, re.MULTILINE))
    # A block's first move, when it is an eviction, only places it on the host (the prefetch
    # mover tells every new block so; the remap mover a block the device had no room for):
    # counted as "place", not "evict".
    moves = {}
    last = {}
    with open(trace) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and fields[1] == "alloc":
                last[fields[4]] = "alloc"
            elif len(fields) >= 4 and fields[1] in ("evict", "promote"):
                kind, base = fields[1], fields[3]
                if kind == "evict" and last.get(base) == "alloc":
                    kind = "place"
                last[base] = kind
                moves[(kind, base)] = moves.get((kind, base), 0) + 1
    return policy, output, bases, moves


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for option in ("--simcuda", "--shim", "--program", "--directory", "--no-unwinder-directory"):
        parser.add_argument(option, required=True)
    parser.add_argument("--mover", choices=("remap", "prefetch"), default="remap")
    args = parser.parse_args()
    os.makedirs(args.directory, exist_ok=True)

    policy, output, bases, moves = run(args, "rules", "librule_allocator*")
    library, host = bases["library"], bases["host"]
    if moves.get(("evict", library)):
        fail(f"the pinned block {library} was evicted {moves[('evict', library)]} times")
    if moves.get(("promote", host)) or not moves.get(("place", host)):
        fail(f"the host block {host} was not kept on the host: {moves}")
    others = sum(count for (kind, base), count in moves.items()
                 if kind == "evict" and base not in (library, host))
    if others == 0:
        fail(f"lru evicted none of the program's own blocks, so nothing was tested: {moves}")
    summary = (f"tiered rules: {policy}:10:1 pin matched 1 block, "
               f"{policy}:14:1 prefer_host matched 1 block")
    if summary not in output:
        fail(f"the exit summary lacks '{summary}':\n{output}")
    print(f"{args.mover} mover: pinned block {library}: never evicted; host block {host}: never promoted; "
          f"{others} evictions of the program's own blocks")

    _, _, control_bases, control_moves = run(args, "control", "libnothing*")
    if not control_moves.get(("evict", control_bases["library"])):
        fail(f"without a matching rule lru should have evicted the library's block: "
             f"{control_moves}")
    print("control (pattern matching no library): the library's block was evicted")

    no_unwinder_path = f"{args.no_unwinder_directory}:{args.simcuda}"
    _, output, bases, moves = run(args, "no_unwinder", "librule_allocator*", no_unwinder_path,
                                  allowed=("cannot match",))
    said = output.count("[[tiered.rule]] entries with a library or symbol pattern cannot match")
    if said != 1:
        fail(f"without unw_backtrace the log should say once that patterns cannot match, "
             f"said {said} times:\n{output}")
    if not moves.get(("evict", bases["library"])):
        fail(f"without call stacks the library rule cannot pin, so lru should have evicted the "
             f"library's block: {moves}")
    if moves.get(("promote", bases["host"])) or not moves.get(("place", bases["host"])):
        fail(f"the size rule should still keep {bases['host']} on the host: {moves}")
    print("without unw_backtrace: said once, library rule stood aside, size rule held")


if __name__ == "__main__":
    main()
