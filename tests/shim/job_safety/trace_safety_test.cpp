// The [trace] file of a real job (Note [A trace never stops the job] in
// telemetry/trace_file.h): what a spilling job records, in either format, that the trace never
// lands in a file the job opened as descriptor 2 nor replaces a file that is not a trace, and that
// a full filesystem or a file size limit stops the trace, not the job.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "job_safety_fixture.h"
#include "trace_reader.h"

namespace {

using vramspill::testing::contains;
using vramspill::testing::Environment;
using vramspill::testing::JobSafety;
using vramspill::testing::kSpillingJob;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// How many events of each kind ("alloc spill-managed", "refuse", ...) `trace` holds, and its
// last line.
struct TraceCounts {
  std::map<std::string, int> kinds;
  int events = 0;
  std::string last_line;
};

TraceCounts count_events(const std::string& trace) {
  TraceCounts counts;
  std::istringstream lines(trace);
  for (std::string line; std::getline(lines, line);) {
    counts.last_line = line;
    if (line.starts_with("#")) continue;
    std::istringstream fields(line);
    std::string time, kind, device, route;
    fields >> time >> kind >> device >> route;
    ++counts.events;
    ++counts.kinds[kind == "alloc" || kind == "free" ? kind + " " + route : kind];
  }
  return counts;
}

Environment traced(Environment job, const std::string& path) {
  job["VRAMSPILL_TRACE_FILE"] = path;
  return job;
}

// job_safety_program spill: two 4 MiB blocks fit the 8 MiB budget, four are refused and spill.
void expect_the_spilling_job(const std::string& trace) {
  const TraceCounts counts = count_events(trace);
  EXPECT_TRUE(trace.starts_with("# vramspill trace 1\n")) << trace;
  EXPECT_EQ(counts.kinds.at("device"), 1) << trace;
  EXPECT_EQ(counts.kinds.at("alloc cuMemAlloc"), 2) << trace;
  EXPECT_EQ(counts.kinds.at("refuse"), 4) << trace;
  EXPECT_EQ(counts.kinds.at("alloc spill-managed"), 4) << trace;
  EXPECT_EQ(counts.kinds.at("free cuMemAlloc"), 2) << trace;
  EXPECT_EQ(counts.kinds.at("free spill-managed"), 4) << trace;
  EXPECT_EQ(counts.last_line, "# end " + std::to_string(counts.events) + " events");
}

TEST_F(JobSafety, TraceRecordsEveryAllocationSpillAndFreeOfAJob) {
  const std::string path = (root_ / "job.trace").string();
  const RunResult result = run({"spill"}, traced(kSpillingJob, path));
  ASSERT_TRUE(result.exited(0)) << result.describe();
  expect_the_spilling_job(read_file(path));
}

// Note [The shim's own descriptors]: the job opens a file as descriptor 2 after the shim has
// started; the trace goes to its own file all the same, and the job's file stays empty.
TEST_F(JobSafety, TraceNeverReachesAFileTheJobOpensAsDescriptor2) {
  const std::string program_file = (root_ / "program-output").string();
  const std::string path = (root_ / "job.trace").string();
  const RunResult result =
      run({"closed-stderr-file", program_file}, traced(kSpillingJob, path), true);
  ASSERT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(read_file(program_file), "") << "the shim wrote into the job's file";
  expect_the_spilling_job(read_file(path));
}

// Note [A trace replaces only a trace]: [trace] file names a file of the user's by mistake. The
// job runs to the end, untraced, the log says why, and the file keeps every byte.
TEST_F(JobSafety, ATraceNeverReplacesAFileThatIsNotATrace) {
  const std::string path = (root_ / "results.txt").string();
  std::ofstream(path) << "IMPORTANT USER DATA\n";
  const RunResult result = run({"spill"}, traced(kSpillingJob, path));
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_EQ(read_file(path), "IMPORTANT USER DATA\n");
  EXPECT_TRUE(contains(result.err, "[vramspill] warning: no trace: cannot open " + path +
                                       " (it holds something other than a vramspill trace"))
      << result.err;
  EXPECT_TRUE(contains(result.err, "spilled")) << result.err;
}

// A full tmpfs in a mount namespace of the job's own (root only; skipped elsewhere): the trace
// cannot be written, the job runs to the end, and the log says why once.
TEST_F(JobSafety, AFullFilesystemLeavesTheJobUntracedAndRunning) {
  const std::string mount_and_run =
      "mount -t tmpfs -o size=64k tmpfs \"$0\" || exit 99; "
      "dd if=/dev/zero of=\"$0/fill\" bs=4k 2>/dev/null; exec \"$@\"";
  const std::string directory = root_.string();
  if (!run_program(
           {"/usr/bin/unshare", "-m", "--", "/bin/sh", "-c", mount_and_run, directory, "/bin/true"},
           {}, 30)
           .exited(0))
    GTEST_SKIP() << "cannot mount a tmpfs in a new mount namespace here (needs root)";
  const RunResult result =
      run({"spill"}, traced(kSpillingJob, directory + "/job.trace"), false,
          {"/usr/bin/unshare", "-m", "--", "/bin/sh", "-c", mount_and_run, directory});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.err, "[vramspill] warning: no trace: cannot open " + directory +
                                       "/job.trace (cannot write its first lines: No space left "
                                       "on device); the job runs untraced"))
      << result.err;
  EXPECT_TRUE(contains(result.err, "spilled")) << result.err;
}

// Note [The file size limit]: under `ulimit -S -f 1` (512 bytes; the hard limit stays, as
// simcuda needs it for its memory file) the trace's first lines fit and the rest would cross the
// limit, and the stats segment is larger than the limit. Written, they would raise SIGXFSZ and
// kill the job; the trace and the stats stop instead, and say why.
TEST_F(JobSafety, AFileSizeLimitStopsTheTraceNotTheJob) {
  const std::string path = (root_ / "job.trace").string();
  const RunResult result = run({"spill"}, traced(kSpillingJob, path), false,
                               {"/bin/sh", "-c", "ulimit -S -f 1 && exec \"$@\"", "sh"});
  EXPECT_TRUE(result.exited(0)) << result.describe();
  EXPECT_TRUE(contains(result.err, "[vramspill] warning: the trace " + path + " stopped after "))
      << result.err;
  EXPECT_TRUE(contains(result.err,
                       " events (it reached the file size limit, ulimit -f); the job goes on "
                       "untraced"))
      << result.err;
  EXPECT_TRUE(contains(result.err,
                       "[vramspill] warning: stats are off for this process (the stats file "
                       "would pass the file size limit, ulimit -f)"))
      << result.err;
  EXPECT_LE(read_file(path).size(), 512u);
}

// [trace] format = "binary" (telemetry/trace_binary_format.h) shares the text trace's writer and
// its guarantees: the same job records the same events. (Under `ulimit -f 1`, the test above,
// this job's binary trace would fit in its 512 bytes.)
TEST_F(JobSafety, ABinaryTraceHoldsTheEventsOfTheTextOne) {
  const std::string text_path = (root_ / "job.trace").string();
  const std::string binary_path = (root_ / "job-binary.trace").string();
  const RunResult text_run = run({"spill"}, traced(kSpillingJob, text_path));
  ASSERT_TRUE(text_run.exited(0)) << text_run.describe();
  Environment binary_job = traced(kSpillingJob, binary_path);
  binary_job["VRAMSPILL_TRACE_FORMAT"] = "binary";
  const RunResult binary_run = run({"spill"}, binary_job);
  ASSERT_TRUE(binary_run.exited(0)) << binary_run.describe();
  const vramspill::telemetry::Trace text = vramspill::telemetry::read_trace(text_path);
  const vramspill::telemetry::Trace binary = vramspill::telemetry::read_trace(binary_path);
  EXPECT_TRUE(binary.binary);
  EXPECT_TRUE(binary.complete);
  ASSERT_EQ(binary.events.size(), text.events.size());
  for (std::size_t i = 0; i < text.events.size(); ++i) {
    EXPECT_EQ(binary.events[i].kind, text.events[i].kind) << "event " << i;
    EXPECT_EQ(binary.events[i].route, text.events[i].route) << "event " << i;
    EXPECT_EQ(binary.events[i].bytes, text.events[i].bytes) << "event " << i;
  }
}

}  // namespace
