// The [trace] file's binary format ([trace] format = "binary"): the events of the text format
// (telemetry/trace_format.h, which says what each one means) as tagged records of LEB128
// numbers, for long jobs whose launches make the text large and its formatting a cost.
//
// The header is the text format's, but for its first line, so that `head` still shows whose
// trace it is:
//
//   # vramspill binary trace 1\n
//   # pid 4242\n
//   # start_unix_ns 1764662400000000000\n
//   # command python train.py --epochs 3\n
//
// Right after the command's newline come the records, to the end of the file. Each is
//
//   <tag: 1 byte> <length: varint> <payload: `length` bytes>
//
// and the payload is varints, in the order of the text format's fields:
//
//   tag  record   payload
//   1    device   <time> <device> <total bytes> <limit bytes>
//   2    alloc    <time> <device> <route> <key> <bytes>
//   3    free     <time> <device> <route> <key> <bytes>
//   4    refuse   <time> <device> <route> <bytes>
//   5    evict    <time> <device> <base> <bytes>
//   6    promote  <time> <device> <base> <bytes>
//   7    use      <time> <device> <stream> <count> <base> x count   (count >= 1)
//   8    end      <event count>                                     (the text's "# end")
//   9    launches <time> <launches> <unreadable>
//
// A varint is LEB128: 7 bits a byte, least significant first, the top bit set on every byte
// but the last; a 64-bit number takes 1 to 10 bytes (the tenth holding only bit 63, so 0 or 1).
// <time> is the nanoseconds since the shim started, as in text. A <route> is the route's index
// in kTraceRouteOrder below (core::Route's order, which a test holds the two to). Records are in
// the order the shim wrote them; nothing after the end record.
//
// Note [Binary trace records]
// - Stateless: no number is coded against an earlier record's (no delta times, no table of
//   bases seen), so that each event is encoded before the writer takes its lock, as text lines
//   are (Note [A trace never stops the job] in telemetry/trace_file.h), and any record reads on
//   its own. Delta times would save 2 to 4 of a record's 10 to 70 bytes (an estimate, not
//   measured), and need the encoding done under the lock, in the order of the file.
// - The length before the payload lets a reader tell a record cut short by a killed job (its
//   length runs past the file's end: left out and flagged, as a text line without its newline)
//   from a damaged one (its fields do not fill it exactly: an error naming the byte). It is one
//   byte for all but uses of more than about 15 blocks.
// - Measured with build-trace/tests/shim/vramspill_trace_file_bench --benchmark_filter=threads:1
//   --benchmark_repetitions=10 (RelWithDebInfo, -O2; a shared 2-core machine, so times are
//   rough), medians, per event, text against binary:
//     alloc or free (half of allocation_and_free)  52.5 against 20 bytes, 98 against 69 ns
//     a launch of 8 tiered blocks (a use)         140 against 66 bytes, 528 against 240 ns
//   A use's bases are most of it: a 47-bit address is 7 varint bytes, against " 0x" and 12 hex
//   digits of text.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace vramspill::telemetry {

inline constexpr std::string_view kBinaryTraceFirstLine = "# vramspill binary trace 1";

enum class TraceTag : uint8_t {
  kDevice = 1,
  kAlloc = 2,
  kFree = 3,
  kRefuse = 4,
  kEvict = 5,
  kPromote = 6,
  kUse = 7,
  kEnd = 8,
  kLaunches = 9,  // after the end's tag: tags are part of the format
};
inline constexpr uint8_t kFirstTraceTag = 1;
inline constexpr uint8_t kLastTraceTag = 9;

// The routes by index, as their text tokens (core::route_token()): part of the format, so a new
// route is added at the end.
inline constexpr std::array<std::string_view, 11> kTraceRouteOrder = {"cuMemAlloc",
                                                                      "cuMemAllocPitch",
                                                                      "cuMemAllocManaged",
                                                                      "cuMemAllocAsync",
                                                                      "cuMemAllocFromPoolAsync",
                                                                      "cuMemCreate",
                                                                      "cuArrayCreate",
                                                                      "spill-managed",
                                                                      "spill-host",
                                                                      "spill-vmm-host",
                                                                      "tiered"};

inline constexpr std::size_t kMaxVarintBytes = 10;
// No record is longer: a use lists at most core::SubmissionUse::kCapacity (256) bases, under
// 2 700 bytes (trace_file.cpp checks it). A reader takes a longer length for damage, not for a
// record cut short. Files written when uses listed at most 32 bases (records under 1 KiB) read
// the same.
inline constexpr std::size_t kMaxTracePayloadBytes = 4096;

// Writes `value` at `out`, which has room for kMaxVarintBytes; returns the end of what it wrote.
inline char* put_varint(char* out, uint64_t value) noexcept {
  while (value >= 0x80) {
    *out++ = static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<char>(value);
  return out;
}

enum class VarintRead : uint8_t {
  kRead,
  kCut,      // [at, end) ends inside it
  kTooLong,  // more than kMaxVarintBytes, or over 64 bits
};

// Reads the varint at `at` (not past `end`) into `value` and moves `at` past it; on kCut or
// kTooLong leaves both alone.
inline VarintRead get_varint(const char*& at, const char* end, uint64_t& value) noexcept {
  uint64_t read = 0;
  for (std::size_t i = 0; i < kMaxVarintBytes; ++i) {
    if (at + i == end) return VarintRead::kCut;
    const auto byte = static_cast<uint8_t>(at[i]);
    if (i == kMaxVarintBytes - 1 && byte > 1) return VarintRead::kTooLong;
    read |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      at += i + 1;
      value = read;
      return VarintRead::kRead;
    }
  }
  return VarintRead::kTooLong;
}

}  // namespace vramspill::telemetry
