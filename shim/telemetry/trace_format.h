// The [trace] file: what happened to a job's memory, one event a line, for `vramspill export`
// (and the replay and report tools that read the same file). Text, so that it can be read with
// grep and a few lines of any language; an event is about 40 bytes. [trace] format = "binary"
// writes the same events as compact records instead (telemetry/trace_binary_format.h), under
// the same header; the reader tells the two apart by the first line.
//
//   # vramspill trace 1
//   # pid 4242
//   # start_unix_ns 1764662400000000000
//   # command python train.py --epochs 3
//   0 device 0 85899345920 21474836480
//   183220 alloc 0 cuMemAlloc 0x7f3a00000000 1073741824
//   201877 refuse 0 cuMemAlloc 2147483648
//   204110 alloc 0 spill-host 0x7f1c00000000 2147483648
//   993001 evict 0 0x7f3a00000000 4194304
//   993840 promote 0 0x7f3a40000000 4194304
//   993901 use 0 17 0x7f3a00000000 0x7f3a40000000
//   1204467 free 0 spill-host 0x7f1c00000000 2147483648
//   1204470 launches 5210 12
//   # end 8 events
//
// The header's lines come first, in that order; the command has control characters replaced by
// spaces. Each event starts with the nanoseconds since the shim started (CLOCK_MONOTONIC; add
// start_unix_ns for the wall clock), then its kind, then the device (but for launches):
//   device  <device> <total bytes> <limit bytes>  the budget of a device the job uses
//   alloc   <device> <route> <key> <bytes>        an allocation, on a route (core::route_token():
//                                                 cuMemAlloc ... for the driver's routes,
//                                                 spill-managed, spill-host, spill-vmm-host for
//                                                 spilled ones, tiered for tiered mode's blocks)
//   free    <device> <route> <key> <bytes>        that allocation is gone
//   refuse  <device> <route> <bytes>              a request over the budget (a spill may follow)
//   evict   <device> <base> <bytes>               bytes of the tiered block at base moved to the
//   promote <device> <base> <bytes>               host, or back to the device
//   use     <device> <stream> <base>...           a submission (launch, copy, memset) on stream
//                                                 (a number that tells streams apart) is about
//                                                 to touch the tiered blocks at these bases; the
//                                                 promotions it needs follow it, with those of
//                                                 blocks brought in ahead of later submissions
//   launches <launches> <unreadable>              kernel launches while tiered blocks were
//                                                 tracked, and how many of them had arguments
//                                                 the shim could not read (each taken as
//                                                 touching every block, and never in a use);
//                                                 counted for the whole process, so it has no
//                                                 device; written once, when the process exits
// A tiered block is on the device when allocated, but for what an evict right after its alloc
// says was placed on the host. Uses are tracked in tiered mode only (shim/README.md, "Use
// tracking"), and at most 256 blocks of a submission are listed (core::SubmissionUse::kCapacity).
// A key is what the free names (a device pointer, a VMM handle or a CUarray), in hexadecimal
// with 0x; other numbers are decimal. Events are in the order the shim recorded them, which is
// the order of their times within a thread; threads interleave, so a reader sorts by time if it
// needs to. `# end <count> events` is written when the process exits: a trace without it was
// cut short (the process was killed, or the trace stopped; the log says why), and holds what was
// written up to then. Lines starting with '#' elsewhere are comments. A reader rejects a first
// line other than "# vramspill trace 1" (or the binary format's).
#pragma once

#include <string_view>

namespace vramspill::telemetry {

inline constexpr std::string_view kTraceFirstLine = "# vramspill trace 1";

// Event kinds, as written.
inline constexpr std::string_view kTraceDevice = "device";
inline constexpr std::string_view kTraceAlloc = "alloc";
inline constexpr std::string_view kTraceFree = "free";
inline constexpr std::string_view kTraceRefuse = "refuse";
inline constexpr std::string_view kTraceEvict = "evict";
inline constexpr std::string_view kTracePromote = "promote";
inline constexpr std::string_view kTraceUse = "use";
inline constexpr std::string_view kTraceLaunches = "launches";

}  // namespace vramspill::telemetry
