#!/usr/bin/env python3
"""Turn a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into a plain list of
allocation events that pool benchmarks replay (tests/shim/tiers/pool_replay_bench.cpp).

    segment_events.py trace.pickle > events.txt                 # PyTorch's cudaMalloc/cudaFree
    segment_events.py --level blocks trace.pickle > events.txt  # the program's tensors

Output, one event a line:
    a <id> <bytes> <stream>    allocate a block of <bytes> on <stream> and call it <id>
    f <id> <stream>            free block <id> on <stream>
Lines starting with '#' are comments. Ids are small integers, never reused, so a replayer needs
no address map. <stream> is the CUDA stream the snapshot recorded (0: the default stream): a
block freed on one stream is reused at once only by that stream, which is what a stream-ordered
pool's fragmentation depends on. Replayers that ignore streams read the first fields only.
A snapshot with nothing recorded for the requested device is an error naming the devices present
(exit status 2), not an empty list.

The snapshot's trace is a ring buffer: memory allocated before recording started appears only in
the snapshot's state at dump time. So the state at the start of the trace is rebuilt by walking
the trace backwards from the dump-time state (an alloc event removes its block, a free event puts
it back); those blocks are emitted first, in address order, as if allocated before the trace.
- segments level: segment_alloc / segment_free, sizes are PyTorch's segment sizes (what a shim
  under the caching allocator sees as cuMemAlloc / cuMemFree).
- blocks level: alloc / free_completed with requested sizes (what the pool would see if the
  program ran without PyTorch's cache, PYTORCH_NO_CUDA_MEMORY_CACHING=1; more churn, more sizes).
Reads the pickle with the standard library only (no torch needed).
"""

import argparse
import pickle
import sys

LEVELS = {
    # level: (alloc action, free action)
    "segments": ("segment_alloc", "segment_free"),
    "blocks": ("alloc", "free_completed"),
}


class NoSuchDevice(Exception):
    pass


def devices_present(snapshot):
    """Devices with a segment or a recorded event, ascending."""
    present = {segment.get("device", 0) for segment in snapshot.get("segments", [])}
    present.update(device for device, trace in enumerate(snapshot.get("device_traces", []))
                   if trace)
    return sorted(present)


def final_state(segments, level):
    """Address -> (bytes, stream) of what was live when the snapshot was dumped."""
    live = {}
    for segment in segments:
        stream = segment.get("stream", 0)
        if level == "segments":
            live[segment["address"]] = (segment["total_size"], stream)
        else:
            for block in segment.get("blocks", []):
                if block["state"] in ("active_allocated", "active_pending_free"):
                    size = block.get("requested_size") or block["size"]
                    live[block["address"]] = (size, stream)
    return live


def events(snapshot, level, device):
    present = devices_present(snapshot)
    if device not in present:
        raise NoSuchDevice(f"nothing recorded for device {device}; devices present: "
                           f"{', '.join(map(str, present)) or 'none'}")
    alloc_action, free_action = LEVELS[level]
    traces = snapshot.get("device_traces", [])
    trace = [e for e in (traces[device] if device < len(traces) else [])
             if e["action"] in (alloc_action, free_action)]
    live = final_state([s for s in snapshot.get("segments", []) if s.get("device", 0) == device],
                       level)

    # Backwards: before an alloc its block did not exist; before a free it did.
    for event in reversed(trace):
        if event["action"] == alloc_action:
            live.pop(event["addr"], None)
        else:
            live[event["addr"]] = (event["size"], event.get("stream", 0))

    next_id = 0
    ids = {}  # address -> id of the live block there
    out = []
    for address in sorted(live):
        size, stream = live[address]
        ids[address] = next_id
        out.append(f"a {next_id} {size} {stream}")
        next_id += 1
    initial = len(out)
    for event in trace:
        address = event["addr"]
        stream = event.get("stream", 0)
        if event["action"] == alloc_action:
            ids[address] = next_id
            out.append(f"a {next_id} {event['size']} {stream}")
            next_id += 1
        elif address in ids:
            out.append(f"f {ids.pop(address)} {stream}")
    return initial, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a PyTorch memory snapshot (.pickle)")
    parser.add_argument("--level", choices=sorted(LEVELS), default="segments")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    with open(args.trace, "rb") as f:
        snapshot = pickle.load(f)
    try:
        initial, lines = events(snapshot, args.level, args.device)
    except NoSuchDevice as e:
        parser.exit(2, f"{parser.prog}: error: {args.trace}: {e}\n")
    out = sys.stdout
    out.write(f"# vramspill pool events v2: {args.trace} level={args.level} "
              f"device={args.device}\n")
    out.write(f"# {initial} blocks live before the trace, {len(lines) - initial} events after\n")
    out.write("\n".join(lines))
    out.write("\n")


if __name__ == "__main__":
    main()
