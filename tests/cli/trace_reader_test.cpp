// The [trace] file's reader (tools/cli/trace_reader.h): every line trace_format.h describes,
// traces cut short, and each kind of bad line named with its line number; and the binary
// format's records (trace_binary_format.h), each kind of damage named with its byte.
// (tests/shim/trace_file_test.cpp reads what the writer writes, in both formats, and binary
// traces cut at every byte.)
#include "trace_reader.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <sstream>
#include <string>

#include "telemetry/trace_binary_format.h"

namespace vramspill::telemetry {
namespace {

constexpr const char* kHeader =
    "# vramspill trace 1\n"
    "# pid 4242\n"
    "# start_unix_ns 1764662400000000000\n"
    "# command python train.py --epochs 3\n";

Trace parse(const std::string& text) {
  std::istringstream input(text);
  return parse_trace(input, "job.trace");
}

// The message parse() throws for `text`.
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const TraceError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(TraceReader, ReadsTheFormatsExample) {
  const Trace trace = parse(std::string(kHeader) +
                            "0 device 0 85899345920 21474836480\n"
                            "183220 alloc 0 cuMemAlloc 0x7f3a00000000 1073741824\n"
                            "201877 refuse 0 cuMemAlloc 2147483648\n"
                            "204110 alloc 0 spill-host 0x7f1c00000000 2147483648\n"
                            "# a comment\n"
                            "993001 evict 0 0x7f3a00000000 4194304\n"
                            "993840 promote 1 0x7f3a40000000 4194304\n"
                            "993901 use 1 17 0x7f3a00000000 0x7f3a40000000\n"
                            "1204467 free 0 spill-host 0x7f1c00000000 2147483648\n"
                            "1204470 launches 5210 12\n"
                            "# end 9 events\n");
  EXPECT_EQ(trace.pid, 4242u);
  EXPECT_EQ(trace.start_unix_ns, 1764662400000000000u);
  EXPECT_EQ(trace.command, "python train.py --epochs 3");
  EXPECT_TRUE(trace.complete);
  EXPECT_FALSE(trace.dropped_partial_event);
  ASSERT_EQ(trace.events.size(), 9u);

  const TraceEvent& device = trace.events[0];
  EXPECT_EQ(device.kind, TraceEventKind::kDevice);
  EXPECT_EQ(device.bytes, 85899345920u);
  EXPECT_EQ(device.limit_bytes, 21474836480u);

  const TraceEvent& alloc = trace.events[1];
  EXPECT_EQ(alloc.time_ns, 183220u);
  EXPECT_EQ(alloc.kind, TraceEventKind::kAlloc);
  EXPECT_EQ(alloc.device, 0);
  EXPECT_EQ(alloc.route, core::Route::kMemAlloc);
  EXPECT_EQ(alloc.key, 0x7f3a00000000u);
  EXPECT_EQ(alloc.bytes, 1073741824u);

  EXPECT_EQ(trace.events[2].kind, TraceEventKind::kRefuse);
  EXPECT_EQ(trace.events[2].bytes, 2147483648u);
  EXPECT_EQ(trace.events[3].route, core::Route::kSpillHost);
  EXPECT_EQ(trace.events[4].kind, TraceEventKind::kEvict);
  EXPECT_EQ(trace.events[4].key, 0x7f3a00000000u);
  EXPECT_EQ(trace.events[5].kind, TraceEventKind::kPromote);
  EXPECT_EQ(trace.events[5].device, 1);
  const TraceEvent& use = trace.events[6];
  EXPECT_EQ(use.kind, TraceEventKind::kUse);
  EXPECT_EQ(use.device, 1);
  EXPECT_EQ(use.stream, 17u);
  EXPECT_EQ(use.bases, (std::vector<uint64_t>{0x7f3a00000000u, 0x7f3a40000000u}));
  EXPECT_EQ(trace.events[7].kind, TraceEventKind::kFree);
  EXPECT_EQ(trace.events[7].route, core::Route::kSpillHost);
  const TraceEvent& launches = trace.events[8];
  EXPECT_EQ(launches.kind, TraceEventKind::kLaunches);
  EXPECT_EQ(launches.launches, 5210u);
  EXPECT_EQ(launches.unreadable_launches, 12u);
}

TEST(TraceReader, ReadsEveryRouteToken) {
  std::string text = kHeader;
  for (std::size_t index = 0; index < core::kRouteCount; ++index) {
    text += "1 alloc 0 " + std::string(core::route_token(static_cast<core::Route>(index))) + " 0x" +
            std::to_string(index + 1) + " 4096\n";
  }
  const Trace trace = parse(text);
  ASSERT_EQ(trace.events.size(), core::kRouteCount);
  for (std::size_t index = 0; index < core::kRouteCount; ++index) {
    EXPECT_EQ(trace.events[index].route, static_cast<core::Route>(index));
  }
}

TEST(TraceReader, AnEmptyCommandIsEmpty) {
  const Trace trace = parse("# vramspill trace 1\n# pid 1\n# start_unix_ns 2\n# command \n");
  EXPECT_EQ(trace.command, "");
  EXPECT_TRUE(trace.events.empty());
}

TEST(TraceReader, ATraceWithoutItsEndIsIncompleteAndKeepsItsEvents) {
  const Trace trace = parse(std::string(kHeader) +
                            "1 alloc 0 cuMemAlloc 0x1000 4096\n"
                            "2 alloc 0 cuMemAlloc 0x2000 4096\n");
  EXPECT_FALSE(trace.complete);
  EXPECT_FALSE(trace.dropped_partial_event);
  EXPECT_EQ(trace.events.size(), 2u);
}

TEST(TraceReader, ALastLineCutShortIsLeftOutNotAnError) {
  const Trace trace = parse(std::string(kHeader) +
                            "1 alloc 0 cuMemAlloc 0x1000 4096\n"
                            "2 alloc 0 cuMemAl");
  EXPECT_FALSE(trace.complete);
  EXPECT_TRUE(trace.dropped_partial_event);
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].key, 0x1000u);
}

TEST(TraceReader, RejectsAFileThatIsNotATrace) {
  EXPECT_EQ(error_of("time,event\n"),
            "job.trace:1: not a vramspill trace: expected '# vramspill trace 1' or '# vramspill "
            "binary trace 1' as the first line, found 'time,event'");
  EXPECT_EQ(error_of(""),
            "job.trace:1: empty: expected '# vramspill trace 1' or '# vramspill binary trace 1' "
            "as the first line");
  EXPECT_EQ(error_of("# vramspill trace 2\n"),
            "job.trace:1: a trace of format version '2'; this vramspill reads version 1");
}

TEST(TraceReader, NamesTheHeaderLineThatIsWrong) {
  EXPECT_EQ(error_of("# vramspill trace 1\n# command x\n"),
            "job.trace:2: expected '# pid ...', found '# command x'");
  EXPECT_EQ(error_of("# vramspill trace 1\n# pid 12\n"),
            "job.trace:3: the trace ends in its header: expected '# start_unix_ns ...'");
  EXPECT_EQ(error_of("# vramspill trace 1\n# pid twelve\n"),
            "job.trace:2: bad number 'twelve' for pid: expected a decimal number of up to 20 "
            "digits");
}

TEST(TraceReader, RejectsAnUnknownEventKind) {
  EXPECT_EQ(error_of(std::string(kHeader) + "1 alloc 0 cuMemAlloc 0x1000 4096\n5 allocate 0\n"),
            "job.trace:6: unknown event kind 'allocate': expected device, alloc, free, refuse, "
            "evict, promote, use or launches");
}

TEST(TraceReader, RejectsABadNumber) {
  EXPECT_EQ(error_of(std::string(kHeader) + "1 alloc 0 cuMemAlloc 0x1000 4k\n"),
            "job.trace:5: bad number '4k' for <bytes>: expected a decimal number of up to 20 "
            "digits");
  EXPECT_EQ(error_of(std::string(kHeader) + "1 alloc 0 cuMemAlloc 1000 4096\n"),
            "job.trace:5: bad number '1000' for <key>: expected a hexadecimal number with 0x, of "
            "up to 16 digits");
  EXPECT_EQ(error_of(std::string(kHeader) + "-1 alloc 0 cuMemAlloc 0x1000 4096\n"),
            "job.trace:5: bad number '-1' for time: expected a decimal number of up to 20 digits");
  EXPECT_EQ(error_of(std::string(kHeader) + "1 alloc 99999999999 cuMemAlloc 0x1000 4096\n"),
            "job.trace:5: device 99999999999 is out of range: expected 0 to 1023");
}

// Note [What a trace may hold]: a device the driver could never have, which a tool would size a
// vector of devices by.
TEST(TraceReader, RefusesADeviceAboveTheCap) {
  EXPECT_EQ(parse(std::string(kHeader) + "1 device 1023 1073741824 8388608\n").events[0].device,
            1023);
  EXPECT_EQ(error_of(std::string(kHeader) + "1 device 0 1073741824 8388608\n" +
                     "2 alloc 2147483647 cuMemAlloc 0x1000 4096\n"),
            "job.trace:6: device 2147483647 is out of range: expected 0 to 1023");
  EXPECT_EQ(error_of(std::string(kHeader) + "1 use 1024 3 0x1000\n"),
            "job.trace:5: device 1024 is out of range: expected 0 to 1023");
}

// Note [What a trace may hold]: sizes no job allocates, which replay would round to no granules.
TEST(TraceReader, RefusesAllocationsNoJobMakes) {
  EXPECT_EQ(error_of(std::string(kHeader) + "1 device 0 1073741824 8388608\n" +
                     "200 alloc 0 tiered 0x1000 0\n300 use 0 0 0x1000\n"),
            "job.trace:6: a tiered block of 0 bytes: tiered mode never makes one");
  EXPECT_EQ(error_of(std::string(kHeader) + "200 alloc 0 tiered 0x1000 18446744073709551615\n"),
            "job.trace:5: an allocation of 18446744073709551615 bytes: more than any address "
            "space holds (2^57 bytes)");
  EXPECT_EQ(error_of(std::string(kHeader) + "200 free 0 spill-host 0x1000 144115188075855873\n"),
            "job.trace:5: an allocation of 144115188075855873 bytes: more than any address "
            "space holds (2^57 bytes)");
  // What a job may write: 2^57 bytes, and a request over the budget of any size.
  EXPECT_EQ(parse(std::string(kHeader) + "1 alloc 0 tiered 0x1000 144115188075855872\n" +
                  "2 refuse 0 cuMemAlloc 18446744073709551615\n")
                .events.size(),
            2u);
}

TEST(TraceReader, RejectsAnUnknownRoute) {
  EXPECT_EQ(error_of(std::string(kHeader) + "1 free 0 cudaMalloc 0x1000 4096\n"),
            "job.trace:5: unknown route 'cudaMalloc': expected cuMemAlloc, cuMemAllocPitch, "
            "cuMemAllocManaged, cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemCreate, "
            "cuArrayCreate, spill-managed, spill-host, spill-vmm-host or tiered");
}

TEST(TraceReader, RejectsMissingAndExtraFields) {
  EXPECT_EQ(error_of(std::string(kHeader) + "1 alloc 0 cuMemAlloc 0x1000\n"),
            "job.trace:5: the alloc event ends before <bytes> (expected '<time> alloc <device> "
            "<route> <key> <bytes>')");
  EXPECT_EQ(error_of(std::string(kHeader) + "1 evict 0 0x1000 4096 7\n"),
            "job.trace:5: unexpected '7' after the evict event's fields (expected '<time> evict "
            "<device> <base> <bytes>')");
  EXPECT_EQ(error_of(std::string(kHeader) + "1 launches 0 40 2\n"),
            "job.trace:5: unexpected '2' after the launches event's fields (expected '<time> "
            "launches <launches> <unreadable>')");
  EXPECT_EQ(error_of(std::string(kHeader) + "1 use 0 3\n"),
            "job.trace:5: the use event ends before <base> (expected '<time> use <device> "
            "<stream> <base>...')");
  EXPECT_EQ(error_of(std::string(kHeader) + "1 use 0 3 0x1000 4096\n"),
            "job.trace:5: bad number '4096' for <base>: expected a hexadecimal number with 0x, of "
            "up to 16 digits");
  EXPECT_EQ(error_of(std::string(kHeader) + "17\n"),
            "job.trace:5: expected an event kind after the time, found the line's end");
}

TEST(TraceReader, ChecksTheEndLine) {
  EXPECT_EQ(error_of(std::string(kHeader) + "1 alloc 0 cuMemAlloc 0x1000 4096\n# end 2 events\n"),
            "job.trace:6: the '# end' line counts 2 events, but the trace holds 1: it was "
            "changed after it was written");
  EXPECT_EQ(error_of(std::string(kHeader) + "# end\n"),
            "job.trace:5: expected '# end <count> events', found '# end'");
  EXPECT_EQ(error_of(std::string(kHeader) + "# end 0 events\n1 alloc 0 cuMemAlloc 0x1000 4096\n"),
            "job.trace:6: an event after the trace's '# end' line (line 5)");
}

std::string read_error(const std::string& path) {
  try {
    read_trace(path);
  } catch (const TraceError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(TraceReader, ReadTraceNamesAFileItCannotOpen) {
  EXPECT_EQ(read_error("/nonexistent/job.trace"),
            "/nonexistent/job.trace: cannot read it: No such file or directory");
}

// Note [Only regular files]: /dev/zero would be read without end, a directory as nothing.
TEST(TraceReader, ReadTraceRefusesWhatIsNotARegularFile) {
  EXPECT_EQ(read_error("/dev/zero"),
            "/dev/zero: cannot read it: it is a character device, not a regular file");
  EXPECT_EQ(read_error("/tmp"), "/tmp: cannot read it: it is a directory, not a regular file");
}

constexpr const char* kBinaryHeader =
    "# vramspill binary trace 1\n"
    "# pid 4242\n"
    "# start_unix_ns 1764662400000000000\n"
    "# command python train.py --epochs 3\n";
const std::size_t kBinaryHeaderBytes = std::strlen(kBinaryHeader);

std::string varint(uint64_t value) {
  std::array<char, kMaxVarintBytes> bytes{};
  return {bytes.data(), put_varint(bytes.data(), value)};
}

// A record: `tag`, the payload's length, and `fields` as varints.
std::string record(TraceTag tag, std::initializer_list<uint64_t> fields) {
  std::string payload;
  for (const uint64_t field : fields) payload += varint(field);
  return static_cast<char>(tag) + varint(payload.size()) + payload;
}

std::string alloc_record(uint64_t key) {
  return record(TraceTag::kAlloc, {183220, 0, 0, key, 4096});  // route 0: cuMemAlloc
}

TEST(TraceReader, ReadsABinaryTrace) {
  const Trace trace = parse(
      std::string(kBinaryHeader) + record(TraceTag::kDevice, {0, 1, 85899345920, 21474836480}) +
      alloc_record(0x7f3a00000000) + record(TraceTag::kRefuse, {201877, 0, 8, 2147483648}) +
      record(TraceTag::kEvict, {993001, 0, 0x7f3a00000000, 4194304}) +
      record(TraceTag::kPromote, {993840, 0, 0x7f3a00000000, 4194304}) +
      record(TraceTag::kUse, {993901, 1, 17, 2, 0x7f3a00000000, 0x2000}) +
      record(TraceTag::kFree, {1204467, 0, 10, 0x7f3a00000000, 4096}) +
      record(TraceTag::kEnd, {7}));
  EXPECT_EQ(trace.pid, 4242u);
  EXPECT_EQ(trace.start_unix_ns, 1764662400000000000u);
  EXPECT_EQ(trace.command, "python train.py --epochs 3");
  EXPECT_TRUE(trace.complete);
  EXPECT_FALSE(trace.dropped_partial_event);
  ASSERT_EQ(trace.events.size(), 7u);
  EXPECT_EQ(trace.events[0].kind, TraceEventKind::kDevice);
  EXPECT_EQ(trace.events[0].device, 1);
  EXPECT_EQ(trace.events[0].bytes, 85899345920u);
  EXPECT_EQ(trace.events[0].limit_bytes, 21474836480u);
  const TraceEvent& alloc = trace.events[1];
  EXPECT_EQ(alloc.time_ns, 183220u);
  EXPECT_EQ(alloc.kind, TraceEventKind::kAlloc);
  EXPECT_EQ(alloc.route, core::Route::kMemAlloc);
  EXPECT_EQ(alloc.key, 0x7f3a00000000u);
  EXPECT_EQ(alloc.bytes, 4096u);
  EXPECT_EQ(trace.events[2].kind, TraceEventKind::kRefuse);
  EXPECT_EQ(trace.events[2].route, core::Route::kSpillHost);
  EXPECT_EQ(trace.events[2].bytes, 2147483648u);
  EXPECT_EQ(trace.events[3].kind, TraceEventKind::kEvict);
  EXPECT_EQ(trace.events[3].route, core::Route::kTiered);
  EXPECT_EQ(trace.events[4].kind, TraceEventKind::kPromote);
  const TraceEvent& use = trace.events[5];
  EXPECT_EQ(use.kind, TraceEventKind::kUse);
  EXPECT_EQ(use.device, 1);
  EXPECT_EQ(use.stream, 17u);
  EXPECT_EQ(use.bases, (std::vector<uint64_t>{0x7f3a00000000u, 0x2000u}));
  EXPECT_EQ(trace.events[6].kind, TraceEventKind::kFree);
  EXPECT_EQ(trace.events[6].route, core::Route::kTiered);
}

// A route is written as its index: the format's list must stay core::Route's order.
TEST(TraceReader, TheBinaryRouteOrderIsCoreRoutes) {
  ASSERT_EQ(kTraceRouteOrder.size(), core::kRouteCount);
  for (std::size_t index = 0; index < core::kRouteCount; ++index) {
    EXPECT_EQ(kTraceRouteOrder[index], core::route_token(static_cast<core::Route>(index)));
  }
}

TEST(TraceReader, TheLargestNumbersReadBack) {
  const Trace trace =
      parse(std::string(kBinaryHeader) +
            record(TraceTag::kEvict, {UINT64_MAX, kMaxTraceDevice, UINT64_MAX, UINT64_MAX}));
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].time_ns, UINT64_MAX);
  EXPECT_EQ(trace.events[0].device, 1023);
  EXPECT_EQ(trace.events[0].key, UINT64_MAX);
  EXPECT_EQ(trace.events[0].bytes, UINT64_MAX);
  EXPECT_EQ(varint(UINT64_MAX).size(), kMaxVarintBytes);
}

TEST(TraceReader, ABinaryRecordCutShortIsLeftOutNotAnError) {
  const std::string whole =
      std::string(kBinaryHeader) + alloc_record(0x1000) + alloc_record(0x2000);
  const Trace trace = parse(whole.substr(0, whole.size() - 3));
  EXPECT_FALSE(trace.complete);
  EXPECT_TRUE(trace.dropped_partial_event);
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].key, 0x1000u);
  // Cut after its tag: the length is not there yet.
  EXPECT_TRUE(parse(std::string(kBinaryHeader) + "\x02").dropped_partial_event);
  const Trace no_records = parse(kBinaryHeader);
  EXPECT_FALSE(no_records.dropped_partial_event);
  EXPECT_TRUE(no_records.events.empty());
}

TEST(TraceReader, RejectsAnUnknownRecordTag) {
  const std::string at = std::to_string(kBinaryHeaderBytes + alloc_record(0x1000).size());
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + alloc_record(0x1000) + "A\x01\x07"),
            "job.trace: byte " + at +
                ": unknown record tag 0x41: expected a tag from 1 to 9 (device, alloc, free, "
                "refuse, evict, promote, use, end, launches)");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + '\0'),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes) +
                ": unknown record tag 0x00: expected a tag from 1 to 9 (device, alloc, free, "
                "refuse, evict, promote, use, end, launches)");
}

TEST(TraceReader, RejectsANumberOfMoreThanTenBytes) {
  // An evict record whose <base> runs on for 11 bytes.
  const std::string eleven = std::string(10, '\x80') + '\x01';
  std::string evict =
      std::string(1, '\x05') + varint(2 + eleven.size() + 1) + '\x07' + '\x00' + eleven + '\x01';
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + evict),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 4) +
                ": bad number for <base>: a varint of more than 10 bytes or 64 bits");
  // Ten bytes, but over 64 bits.
  const std::string over = std::string(9, '\xff') + '\x02';
  evict = std::string(1, '\x05') + varint(2 + over.size() + 1) + '\x07' + '\x00' + over + '\x01';
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + evict),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 4) +
                ": bad number for <base>: a varint of more than 10 bytes or 64 bits");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + '\x05' + std::string(10, '\xff') + '\x01'),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 1) +
                ": bad record length: a number of more than 10 bytes or 64 bits");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + '\x05' + varint(5000)),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 1) +
                ": a record of 5000 bytes: expected at most " +
                std::to_string(kMaxTracePayloadBytes));
}

TEST(TraceReader, RejectsMissingAndExtraBinaryFields) {
  const std::string at = std::to_string(kBinaryHeaderBytes);
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kAlloc, {1, 0, 0, 0x1000})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 2 + 5) +
                ": the alloc record at byte " + at +
                " ends before <bytes> (expected <time> <device> <route> <key> <bytes>)");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kEvict, {1, 0, 0x10, 4096, 7})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 2 + 5) +
                ": 1 byte left after the evict record's fields (expected <time> <device> <base> "
                "<bytes>)");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kUse, {1, 0, 3, 2, 0x10})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 2 + 5) +
                ": the use record at byte " + at +
                " ends before <base> (expected <time> <device> <stream> <count> <base>...)");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kUse, {1, 0, 3, 0})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 5) +
                ": a use record of no base (expected <time> <device> <stream> <count> <base>..., "
                "with a count of at least 1)");
  // A varint that runs past its record's length.
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + std::string("\x05\x03\x01\x00\x80", 5) +
                     alloc_record(1)),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 4) +
                ": the evict record at byte " + at +
                " ends inside <base> (expected <time> <device> <base> <bytes>)");
}

TEST(TraceReader, RejectsABadBinaryRouteOrDevice) {
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kFree, {1, 0, 11, 0x10, 1})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 4) +
                ": unknown route 11: expected 0 (cuMemAlloc) to 10 (tiered)");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kEvict, {1, 1ULL << 31, 0, 1})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 3) +
                ": device 2147483648 is out of range: expected 0 to 1023");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kDevice, {1, 1024, 1, 1})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 3) +
                ": device 1024 is out of range: expected 0 to 1023");
}

TEST(TraceReader, RefusesBinaryAllocationsNoJobMakes) {
  const std::string at = std::to_string(kBinaryHeaderBytes);
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kAlloc, {1, 0, 10, 0x10, 0})),
            "job.trace: byte " + at +
                ": the alloc record: a tiered block of 0 bytes: tiered mode never makes one");
  EXPECT_EQ(
      error_of(std::string(kBinaryHeader) + record(TraceTag::kFree, {1, 0, 0, 0x10, UINT64_MAX})),
      "job.trace: byte " + at +
          ": the free record: an allocation of 18446744073709551615 bytes: more than any "
          "address space holds (2^57 bytes)");
}

TEST(TraceReader, ChecksTheEndRecord) {
  const std::string at = std::to_string(kBinaryHeaderBytes + alloc_record(1).size());
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + alloc_record(1) + record(TraceTag::kEnd, {2})),
            "job.trace: byte " + at +
                ": the end record counts 2 events, but the trace holds 1: it was changed after it "
                "was written");
  const std::string end_record = record(TraceTag::kEnd, {0});
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + end_record + alloc_record(1)),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + end_record.size()) +
                ": a record after the trace's end record (at byte " +
                std::to_string(kBinaryHeaderBytes) + ")");
  EXPECT_EQ(error_of(std::string(kBinaryHeader) + record(TraceTag::kEnd, {0, 0})),
            "job.trace: byte " + std::to_string(kBinaryHeaderBytes + 3) +
                ": 1 byte left after the end record's fields (expected <event count>)");
}

TEST(TraceReader, RejectsABinaryTraceOfAnotherVersion) {
  EXPECT_EQ(error_of("# vramspill binary trace 2\n"),
            "job.trace:1: a binary trace of format version '2'; this vramspill reads version 1");
  EXPECT_EQ(error_of("# vramspill binary trace 1\n# pid 12\n"),
            "job.trace:3: the trace ends in its header: expected '# start_unix_ns ...'");
}

}  // namespace
}  // namespace vramspill::telemetry
