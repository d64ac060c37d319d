// The [trace] file's writer (telemetry/trace_file.h): the lines trace_format.h promises, told by
// the ledger, across many buffers, and Note [A trace never stops the job]: a file that fails or
// stops being the trace's own ends the trace and nothing else, and two writers never share a
// file.
#include "telemetry/trace_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/ledger.h"
#include "lifecycle/scratch_directory.h"
#include "telemetry/trace_format.h"

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
  ASSERT_TRUE(trace.open((root_ / "job.trace").string(), problem)) << problem;
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
  ASSERT_TRUE(trace.open((root_ / "long.trace").string(), problem)) << problem;
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
  ASSERT_TRUE(first.open(path, problem)) << problem;
  EXPECT_EQ(first.path(), expanded);
  // The second holds its own open file description, as another process would: the lock stops
  // it from truncating the first's trace.
  ASSERT_TRUE(second.open(path, problem)) << problem;
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

TEST_F(TraceFileTest, AFileThatCannotBeWrittenIsNoTrace) {
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0);
  TraceFile trace;
  std::string problem;
  EXPECT_FALSE(trace.adopt(full, "/dev/full", problem));
  EXPECT_EQ(problem, "cannot write its first lines: No space left on device");
  trace.evicted(0, 1, 2);  // dropped, without a crash
  trace.finish();
}

TEST_F(TraceFileTest, APathThatIsNotARegularFileIsRefused) {
  TraceFile trace;
  std::string problem;
  EXPECT_FALSE(trace.open(root_.string(), problem));
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
  ASSERT_TRUE(trace.adopt(fd, trace_path, problem)) << problem;
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

}  // namespace
}  // namespace vramspill::telemetry
