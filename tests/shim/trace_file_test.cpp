// The [trace] file's writer (telemetry/trace_file.h): the lines trace_format.h promises, told by
// the ledger, across many buffers, and Note [A trace never stops the job]: a file that fails or
// stops being the trace's own ends the trace and nothing else, and two writers never share a
// file. And the binary format (trace_binary_format.h): the same events as text, read back by the
// reader, which takes a binary trace cut at any byte for one cut short.
#include "telemetry/trace_file.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/ledger.h"
#include "core/use_tracker.h"
#include "lifecycle/scratch_directory.h"
#include "telemetry/trace_binary_format.h"
#include "telemetry/trace_format.h"
#include "trace_reader.h"

namespace vramspill::telemetry {
namespace {

namespace fs = std::filesystem;
using core::Route;

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whether `text` is a decimal number (GCC 12's std::regex trips -Wmaybe-uninitialized under
// AddressSanitizer, so no regex here).
bool all_digits(const std::string& text) {
  return !text.empty() && std::ranges::all_of(text, [](char c) { return c >= '0' && c <= '9'; });
}

// The event lines, each without its time (checked to be a number).
std::vector<std::string> events_of(const std::vector<std::string>& lines) {
  std::vector<std::string> events;
  for (const std::string& line : lines) {
    if (line.starts_with("#")) continue;
    const auto space = line.find(' ');
    EXPECT_TRUE(all_digits(line.substr(0, space))) << line;
    events.push_back(line.substr(space + 1));
  }
  return events;
}

class TraceFileTest : public vramspill::testing::ScratchDirectoryTest {
 protected:
};

TEST_F(TraceFileTest, TheLedgerTellsTheTraceOfEveryEventInTheFormat) {
  TraceFile trace;
  std::string problem;
  ASSERT_TRUE(trace.open((root_ / "job.trace").string(), TraceFormat::kText, problem)) << problem;
  core::Ledger ledger;
  ledger.set_events(&trace);
  ledger.set_device(0, 1 << 30, 8 << 20);
  const core::Admission admitted = ledger.admit(0, Route::kMemAlloc, 6 << 20);
  ASSERT_TRUE(admitted.admitted);
  ledger.on_allocated(admitted, 0x7f0000200000, 6 << 20);
  EXPECT_FALSE(ledger.admit(0, Route::kMemAlloc, 4 << 20).admitted);
  ledger.on_allocated(ledger.admit(0, Route::kSpillHost, 4 << 20), 0x7e0000000000, 4 << 20);
  trace.evicted(0, 0x7f0000200000, 2 << 20);
  trace.promoted(0, 0x7f0000200000, 2 << 20);
  const std::array<uint64_t, 2> touched = {0x7f0000200000, 0x7f0000a00000};
  trace.used(0, 17, touched);
  ASSERT_TRUE(ledger.on_freed(0x7e0000000000).has_value());
  trace.finish();

  const std::vector<std::string> lines = lines_of(trace.path());
  ASSERT_GE(lines.size(), 5U);
  EXPECT_EQ(lines[0], kTraceFirstLine);
  EXPECT_EQ(lines[1], "# pid " + std::to_string(getpid()));
  EXPECT_TRUE(lines[2].starts_with("# start_unix_ns ") && lines[2].size() == 16 + 19 &&
              all_digits(lines[2].substr(16)))
      << lines[2];
  EXPECT_TRUE(lines[3].starts_with("# command ")) << lines[3];
  EXPECT_EQ(lines.back(), "# end 8 events");
  const std::vector<std::string> expected = {"device 0 1073741824 8388608",
                                             "alloc 0 cuMemAlloc 0x7f0000200000 6291456",
                                             "refuse 0 cuMemAlloc 4194304",
                                             "alloc 0 spill-host 0x7e0000000000 4194304",
                                             "evict 0 0x7f0000200000 2097152",
                                             "promote 0 0x7f0000200000 2097152",
                                             "use 0 17 0x7f0000200000 0x7f0000a00000",
                                             "free 0 spill-host 0x7e0000000000 4194304"};
  EXPECT_EQ(events_of(lines), expected);
}

TEST_F(TraceFileTest, EventsBeyondOneBufferAreAllWrittenInOrder) {
  TraceFile trace;
  std::string problem;
  ASSERT_TRUE(trace.open((root_ / "long.trace").string(), TraceFormat::kText, problem)) << problem;
  constexpr uint64_t kEvents = 20'000;  // about 12 buffers
  for (uint64_t i = 0; i < kEvents; ++i) trace.evicted(1, 0x1000 + i, i);
  trace.finish();
  const std::vector<std::string> events = events_of(lines_of(trace.path()));
  ASSERT_EQ(events.size(), kEvents);
  for (uint64_t i = 0; i < kEvents; i += 997) {
    std::ostringstream expected;
    expected << "evict 1 0x" << std::hex << 0x1000 + i << std::dec << " " << i;
    EXPECT_EQ(events[i], expected.str());
  }
  EXPECT_EQ(lines_of(trace.path()).back(), "# end 20000 events");
}

TEST_F(TraceFileTest, PercentPIsTheProcessIdAndASecondWriterGoesBesideTheFirst) {
  const std::string path = (root_ / "job-%p.trace").string();
  const std::string expanded = (root_ / ("job-" + std::to_string(getpid()) + ".trace")).string();
  TraceFile first;
  TraceFile second;
  std::string problem;
  ASSERT_TRUE(first.open(path, TraceFormat::kText, problem)) << problem;
  EXPECT_EQ(first.path(), expanded);
  // The second holds its own open file description, as another process would: the lock stops
  // it from truncating the first's trace.
  ASSERT_TRUE(second.open(path, TraceFormat::kText, problem)) << problem;
  EXPECT_EQ(second.path(), expanded + "." + std::to_string(getpid()));
  first.refused(0, Route::kMemAllocPitch, 1);
  second.refused(0, Route::kArray, 2);
  first.finish();
  second.finish();
  EXPECT_EQ(events_of(lines_of(first.path())),
            std::vector<std::string>{"refuse 0 cuMemAllocPitch 1"});
  EXPECT_EQ(events_of(lines_of(second.path())),
            std::vector<std::string>{"refuse 0 cuArrayCreate 2"});
}

// A filesystem that does not lock files (Lustre without flock, NFSv3 without its lock daemon):
// flock() fails with this error while it is set (this test binary's flock stands in for libc's).
std::atomic<int> flock_error{0};

}  // namespace
}  // namespace vramspill::telemetry

// Named as libc's function, which <fcntl.h>'s struct flock shares a name with.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
extern "C" int flock(int fd, int operation) {
  if (const int error = vramspill::telemetry::flock_error.load()) {
    errno = error;
    return -1;
  }
  static const auto libc_flock = reinterpret_cast<int (*)(int, int)>(dlsym(RTLD_NEXT, "flock"));
  return libc_flock(fd, operation);
}
#pragma GCC diagnostic pop

namespace vramspill::telemetry {
namespace {

// ... is traced to all the same, unlocked: the lock only keeps two jobs from sharing a path.
TEST_F(TraceFileTest, AFilesystemWithoutLocksIsTracedToWithoutOne) {
  for (const int error : {ENOLCK, ENOSYS, EOPNOTSUPP}) {
    flock_error = error;
    const fs::path path = root_ / "unlocked.trace";
    TraceFile trace;
    std::string problem;
    const bool opened = trace.open(path.string(), TraceFormat::kText, problem);
    flock_error = 0;
    ASSERT_TRUE(opened) << std::strerror(error) << ": " << problem;
    EXPECT_EQ(trace.path(), path.string());
    trace.evicted(0, 1, 2);
    trace.finish();
    EXPECT_EQ(events_of(lines_of(path)), std::vector<std::string>{"evict 0 0x1 2"});
  }
}

// Note [A trace replaces only a trace]: a file of the user's named by mistake keeps every byte.
TEST_F(TraceFileTest, AFileThatIsNotATraceIsNeverReplaced) {
  const fs::path path = root_ / "results.txt";
  std::ofstream(path) << "IMPORTANT USER DATA\nline two\n";
  TraceFile trace;
  std::string problem;
  EXPECT_FALSE(trace.open(path.string(), TraceFormat::kText, problem));
  EXPECT_EQ(problem,
            "it holds something other than a vramspill trace (it starts \"IMPORTANT USER DATA\"), "
            "which a trace never replaces: name a new file, or remove this one");
  trace.evicted(0, 1, 2);  // dropped
  trace.finish();
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{"IMPORTANT USER DATA", "line two"}));
}

// The same job run again replaces its trace, of either format, and an empty file is used.
TEST_F(TraceFileTest, AnEarlierTraceOrAnEmptyFileIsReplaced) {
  for (const TraceFormat before : {TraceFormat::kText, TraceFormat::kBinary}) {
    const fs::path path = root_ / "again.trace";
    std::string problem;
    {
      TraceFile first;  // holds its lock until it is gone, as a process until it exits
      ASSERT_TRUE(first.open(path.string(), before, problem)) << problem;
      first.evicted(0, 1, 2);
      first.finish();
    }
    TraceFile second;
    ASSERT_TRUE(second.open(path.string(), TraceFormat::kText, problem)) << problem;
    second.promoted(0, 3, 4);
    second.finish();
    EXPECT_EQ(events_of(lines_of(path)), std::vector<std::string>{"promote 0 0x3 4"});
  }
  const fs::path empty = root_ / "empty.trace";
  std::ofstream{empty};
  TraceFile trace;
  std::string problem;
  ASSERT_TRUE(trace.open(empty.string(), TraceFormat::kText, problem)) << problem;
  trace.finish();
  EXPECT_EQ(lines_of(empty).front(), kTraceFirstLine);
}

TEST_F(TraceFileTest, AFileThatCannotBeWrittenIsNoTrace) {
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0);
  TraceFile trace;
  std::string problem;
  EXPECT_FALSE(trace.adopt(full, "/dev/full", TraceFormat::kText, problem));
  EXPECT_EQ(problem, "cannot write its first lines: No space left on device");
  trace.evicted(0, 1, 2);  // dropped, without a crash
  trace.finish();
}

TEST_F(TraceFileTest, APathThatIsNotARegularFileIsRefused) {
  TraceFile trace;
  std::string problem;
  EXPECT_FALSE(trace.open(root_.string(), TraceFormat::kText, problem));
  EXPECT_EQ(problem, "it is a directory, not a regular file");
  EXPECT_EQ(trace.path(), "");
}

// Note [The shim's own descriptors]: the program closed the trace's descriptor and its next
// file took the number. The trace stops; the program's file gets none of its bytes.
TEST_F(TraceFileTest, ADescriptorTheProgramTookOverStopsTheTraceAndGetsNothing) {
  const std::string trace_path = (root_ / "taken.trace").string();
  const int fd = ::open(trace_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  TraceFile trace;
  std::string problem;
  ASSERT_TRUE(trace.adopt(fd, trace_path, TraceFormat::kText, problem)) << problem;
  trace.evicted(0, 1, 2);
  trace.flush();
  const std::string program_path = (root_ / "program").string();
  const int program_file = ::open(program_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(program_file, 0);
  ASSERT_EQ(dup2(program_file, fd), fd);
  trace.evicted(0, 3, 4);
  trace.finish();
  EXPECT_TRUE(trace.stopped());
  EXPECT_EQ(fs::file_size(program_path), 0U);
  EXPECT_EQ(events_of(lines_of(trace_path)), std::vector<std::string>{"evict 0 0x1 2"});
  ::close(program_file);
  ::close(fd);  // the program's now: the trace never closes it
}

// Every event kind, every route, and the numbers that take the most room in either format.
// Every kind of event, with the largest values a reader accepts (kMaxTraceDevice,
// kMaxTraceAllocationBytes: Note [What a trace may hold] in tools/cli/trace_reader.h).
void record_every_kind(TraceFile& trace) {
  constexpr int kLastDevice = static_cast<int>(kMaxTraceDevice);
  trace.device_configured(0, 85899345920, 21474836480);
  trace.device_configured(kLastDevice, UINT64_MAX, 0);
  for (std::size_t index = 0; index < core::kRouteCount; ++index) {
    const core::Allocation allocation{.key = 0x7f3a00000000 + index,
                                      .bytes = (uint64_t{1} << 20) + index,
                                      .device = static_cast<int>(index % 3),
                                      .route = static_cast<Route>(index)};
    trace.allocated(allocation);
    trace.refused(allocation.device, allocation.route, allocation.bytes * 2);
    trace.freed(allocation);
  }
  trace.allocated({.key = UINT64_MAX,
                   .bytes = kMaxTraceAllocationBytes,
                   .device = kLastDevice,
                   .route = Route::kTiered});
  trace.allocated({.key = 0, .bytes = 0, .device = 0, .route = Route::kMemAlloc});
  trace.evicted(0, 0x7f0000200000, 2 << 20);
  trace.promoted(1, UINT64_MAX, 127);
  const std::array<uint64_t, 1> one = {0x7f0000200000};
  trace.used(0, 0, one);
  std::array<uint64_t, core::SubmissionUse::kCapacity> many{};
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = UINT64_MAX - i * (8 << 20);
  trace.used(2, UINT32_MAX, many);
  trace.launches_counted(UINT64_MAX, 12);
}

// An event as text, without its time (two writers never record the same times).
std::string without_time(const TraceEvent& event) {
  std::ostringstream out;
  out << static_cast<int>(event.kind) << " device " << event.device << " route "
      << core::route_token(event.route) << " key " << event.key << " bytes " << event.bytes
      << " limit " << event.limit_bytes << " stream " << event.stream << " bases";
  for (const uint64_t base : event.bases) out << " " << base;
  out << " launches " << event.launches << " unreadable " << event.unreadable_launches;
  return out.str();
}

std::vector<std::string> without_times(const Trace& trace) {
  std::vector<std::string> events;
  for (const TraceEvent& event : trace.events) events.push_back(without_time(event));
  return events;
}

std::string contents_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Where a binary trace's records start: after its four header lines.
std::size_t records_start(const std::string& contents) {
  std::size_t at = 0;
  for (int line = 0; line < 4; ++line) at = contents.find('\n', at) + 1;
  return at;
}

TEST_F(TraceFileTest, ABinaryTraceHoldsWhatTheTextOneDoes) {
  TraceFile text;
  TraceFile binary;
  std::string problem;
  ASSERT_TRUE(text.open((root_ / "job.trace").string(), TraceFormat::kText, problem)) << problem;
  ASSERT_TRUE(binary.open((root_ / "job.vtrace").string(), TraceFormat::kBinary, problem))
      << problem;
  record_every_kind(text);
  record_every_kind(binary);
  text.finish();
  binary.finish();

  const Trace from_text = read_trace(text.path());
  const Trace from_binary = read_trace(binary.path());
  EXPECT_EQ(from_binary.pid, from_text.pid);
  EXPECT_EQ(from_binary.command, from_text.command);
  EXPECT_NE(from_binary.start_unix_ns, 0U);
  EXPECT_TRUE(from_binary.binary);
  EXPECT_FALSE(from_text.binary);
  EXPECT_TRUE(from_binary.complete);
  EXPECT_FALSE(from_binary.dropped_partial_event);
  ASSERT_EQ(from_binary.events.size(), 4 + 3 * core::kRouteCount + 5);
  EXPECT_EQ(from_binary.events.back().kind, TraceEventKind::kLaunches);
  EXPECT_EQ(from_binary.events.back().launches, UINT64_MAX);
  EXPECT_EQ(from_binary.events.back().unreadable_launches, 12U);
  EXPECT_EQ(without_times(from_binary), without_times(from_text));
  EXPECT_TRUE(std::ranges::is_sorted(from_binary.events, {}, &TraceEvent::time_ns));
  EXPECT_EQ(from_binary.events[2].route, Route::kMemAlloc);

  // The header is the text one but for the first line, so that `head` reads it.
  const std::vector<std::string> text_lines = lines_of(text.path());
  const std::vector<std::string> binary_lines = lines_of(binary.path());
  ASSERT_GE(binary_lines.size(), 4U);
  EXPECT_EQ(binary_lines[0], kBinaryTraceFirstLine);
  EXPECT_EQ(binary_lines[1], text_lines[1]);
  EXPECT_TRUE(binary_lines[2].starts_with("# start_unix_ns ")) << binary_lines[2];
  EXPECT_EQ(binary_lines[3], text_lines[3]);
  EXPECT_LT(fs::file_size(binary.path()), fs::file_size(text.path()) / 2);
}

TEST_F(TraceFileTest, BinaryRecordsBeyondOneBufferAreAllWrittenInOrder) {
  TraceFile trace;
  std::string problem;
  ASSERT_TRUE(trace.open((root_ / "long.vtrace").string(), TraceFormat::kBinary, problem))
      << problem;
  constexpr uint64_t kEvents = 50'000;  // about 10 buffers
  for (uint64_t i = 0; i < kEvents; ++i) trace.evicted(1, 0x1000 + i, i);
  trace.finish();
  const Trace read = read_trace(trace.path());
  EXPECT_TRUE(read.complete);
  ASSERT_EQ(read.events.size(), kEvents);
  for (uint64_t i = 0; i < kEvents; ++i) {
    ASSERT_EQ(read.events[i].key, 0x1000 + i) << i;
    ASSERT_EQ(read.events[i].bytes, i) << i;
  }
}

// A job killed while its trace was written leaves a file cut anywhere: each cut reads as the
// records before it, and one cut inside a record is flagged, never an error.
TEST_F(TraceFileTest, ABinaryTraceCutAtAnyByteReadsAsTheRecordsBeforeTheCut) {
  TraceFile trace;
  std::string problem;
  ASSERT_TRUE(trace.open((root_ / "whole.vtrace").string(), TraceFormat::kBinary, problem))
      << problem;
  trace.device_configured(0, 1 << 30, 8 << 20);
  trace.allocated({.key = 0x7f3a00000000, .bytes = 6 << 20, .device = 0, .route = Route::kTiered});
  trace.refused(0, Route::kMemAlloc, 300);
  trace.evicted(0, 0x7f3a00000000, 2 << 20);
  std::array<uint64_t, 20> bases{};  // a length of 2 bytes
  for (std::size_t i = 0; i < bases.size(); ++i) bases[i] = 0x7f3a00000000 + (i << 21);
  trace.used(0, 3, bases);
  trace.promoted(0, 0x7f3a00000000, 2 << 20);
  trace.freed({.key = 0x7f3a00000000, .bytes = 6 << 20, .device = 0, .route = Route::kTiered});
  trace.finish();
  const std::string whole = contents_of(trace.path());
  const Trace full = read_trace(trace.path());
  ASSERT_EQ(full.events.size(), 7U);

  // Where each record ends, from the layout (trace_binary_format.h).
  std::vector<std::size_t> record_ends;
  for (std::size_t at = records_start(whole); at < whole.size();) {
    const char* cursor = whole.data() + at + 1;
    uint64_t length = 0;
    ASSERT_EQ(get_varint(cursor, whole.data() + whole.size(), length), VarintRead::kRead);
    at = static_cast<std::size_t>(cursor - whole.data()) + length;
    record_ends.push_back(at);
  }
  ASSERT_EQ(record_ends.size(), 8U);  // and the end record
  ASSERT_EQ(record_ends.back(), whole.size());

  const std::vector<std::string> all = without_times(full);
  for (std::size_t cut = records_start(whole); cut < whole.size(); ++cut) {
    std::istringstream input(whole.substr(0, cut));
    Trace read;
    ASSERT_NO_THROW(read = parse_trace(input, "cut.vtrace")) << "cut at byte " << cut;
    const auto whole_records =
        static_cast<std::size_t>(std::ranges::upper_bound(record_ends, cut) - record_ends.begin());
    EXPECT_FALSE(read.complete) << cut;
    EXPECT_EQ(read.dropped_partial_event, whole_records == 0
                                              ? cut != records_start(whole)
                                              : record_ends[whole_records - 1] != cut)
        << cut;
    EXPECT_EQ(without_times(read),
              std::vector<std::string>(all.begin(),
                                       all.begin() + static_cast<std::ptrdiff_t>(whole_records)))
        << cut;
  }
}

}  // namespace
}  // namespace vramspill::telemetry
