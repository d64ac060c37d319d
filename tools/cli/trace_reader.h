// The reading side of the [trace] file, in either format (telemetry/trace_format.h,
// telemetry/trace_binary_format.h), for `vramspill export`, `report`, `replay` and tests. Not part
// of the preloaded library (nothing in the shim calls it, so the linker leaves this object out of
// libvramspill.so); it allocates and throws like any tool.
#pragma once

#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/route.h"

namespace vramspill::telemetry {

enum class TraceEventKind : uint8_t {
  kDevice,
  kAlloc,
  kFree,
  kRefuse,
  kEvict,
  kPromote,
  kUse,
  kLaunches,
};

// One event (a line, or a binary record). Fields an event kind does not have are zero (route:
// kTiered for evict and promote, whose blocks are always tiered ones).
struct TraceEvent {
  uint64_t time_ns = 0;  // since the shim started
  TraceEventKind kind = TraceEventKind::kAlloc;
  int device = 0;
  core::Route route = core::Route::kMemAlloc;  // alloc, free, refuse
  uint64_t key = 0;                            // alloc, free; the block's base for evict, promote
  uint64_t bytes = 0;        // alloc, free, refuse, evict, promote; the device's total for device
  uint64_t limit_bytes = 0;  // device: its budget
  uint64_t stream = 0;       // use: the stream's id
  std::vector<uint64_t> bases;  // use: the tiered blocks the submission touches
  uint64_t launches = 0;        // launches: kernel launches counted (no device: 0)
  uint64_t unreadable_launches = 0;  // launches: of those, the ones that could not be read
};

struct Trace {
  uint64_t pid = 0;
  uint64_t start_unix_ns = 0;
  std::string command;
  // Written in the binary format (telemetry/trace_binary_format.h), not as text.
  bool binary = false;
  // Saw "# end N events" (or the end record): the process exited and the trace holds everything.
  // False for a trace cut short (the process was killed, or the trace stopped), which holds what
  // was written.
  bool complete = false;
  // The last event was cut short while being written (a line without its newline, a binary
  // record that runs past the file's end) and was left out.
  bool dropped_partial_event = false;
  std::vector<TraceEvent> events;  // in file order
};

// Note [What a trace may hold]
// Beyond its format, a reader refuses what no job could have written, so that no tool trips on
// it (a crash, a vector of two billion devices, a replay of a block with no granules): a device
// ordinal above kMaxTraceDevice (the shim's books hold 32 devices, the driver a few hundred at
// most), an alloc or free of more than kMaxTraceAllocationBytes (no address space is larger),
// and a tiered block of 0 bytes (tiered mode takes none: the driver refuses a 0-byte request).
// The message names the line, or the binary record's byte, as for any other damage.
inline constexpr uint64_t kMaxTraceDevice = 1023;
inline constexpr uint64_t kMaxTraceAllocationBytes = uint64_t{1} << 57;  // 57-bit addresses

// What is wrong with a trace, as "NAME:LINE: what was found, what was expected", or in a
// binary trace's records "NAME: byte OFFSET: ..." (the offset in the file, from 0).
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The word an event kind is written as in the text format ("alloc", "use", ...).
std::string_view trace_kind_word(TraceEventKind kind) noexcept;

// Reads the trace in `input`, of either format (told by its first line), naming it `name` in
// errors. Throws TraceError.
Trace parse_trace(std::istream& input, const std::string& name);

// Reads the trace file at `path`. Throws TraceError (also when it cannot be read).
Trace read_trace(const std::string& path);

}  // namespace vramspill::telemetry
