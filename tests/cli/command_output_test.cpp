// The commands' output as a script sees it, run as programs: standard output that cannot take
// it (Note [Standard output that cannot be written] in tools/cli/standard_output.h), `-o -`,
// and traces no job writes (Note [What a trace may hold] in tools/cli/trace_reader.h), which
// are refused by line instead of crashing a tool.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "scratch_directory.h"
#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using vramspill::testing::run_program;
using vramspill::testing::RunResult;

constexpr const char* kTraceHeader =
    "# vramspill trace 1\n# pid 4242\n# start_unix_ns 0\n# command python train.py\n";

// A tiered job on a 8 MiB budget: a 4 MiB block, allocated again while live (a damaged trace),
// used by one submission.
constexpr const char* kRepeatedBlock =
    "100 device 0 1073741824 8388608\n"
    "200 alloc 0 tiered 0x1000 4194304\n"
    "250 alloc 0 tiered 0x1000 4194304\n"
    "300 use 0 0 0x1000\n";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class CommandOutputTest : public vramspill::testing::ScratchDirectoryTest {
 protected:
  // A complete trace of `events` (text lines), named `name`; its path.
  std::string write_trace(const std::string& name, const std::string& events) const {
    const std::string path = (root_ / name).string();
    std::ofstream(path) << kTraceHeader << events << "# end "
                        << std::count(events.begin(), events.end(), '\n') << " events\n";
    return path;
  }

  // vramspill with `arguments`, its standard output sent to `output` (a path).
  static RunResult vramspill_into(const std::string& output, std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(),
                     {"/bin/sh", "-c", "exec \"$0\" \"$@\" >" + output, VRAMSPILL_CLI});
    return run_program(arguments, {}, 60);
  }

  static RunResult vramspill(std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), VRAMSPILL_CLI);
    return run_program(arguments, {}, 60);
  }

  static std::string read(const std::string& file) {
    std::ostringstream text;
    text << std::ifstream(file, std::ios::binary).rdbuf();
    return text.str();
  }
};

TEST_F(CommandOutputTest, every_command_exits_1_when_standard_output_cannot_be_written) {
  const std::string trace = write_trace("job.trace", kRepeatedBlock);
  const std::string directory = root_.string();  // no stats files: "no processes"
  const std::string page = (root_ / "page.html").string();
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"doctor", {"doctor", "--json", "--driver", "none"}},
      {"exporter", {"exporter", "--once", "--directory", directory}},
      {"replay", {"replay", trace}},
      {"stat", {"stat", "--once", "--directory", directory}},
      {"export", {"export", trace, "-o", "-"}},
      {"report", {"report", trace, "-o", "-"}},
      {"report", {"report", trace, "-o", page}}};  // only its summary line is lost
  for (const auto& [command, arguments] : runs) {
    const RunResult result = vramspill_into("/dev/full", arguments);
    EXPECT_TRUE(result.exited(1)) << arguments[0] << ": " << result.describe();
    EXPECT_TRUE(contains(result.err, "vramspill " + command +
                                         ": cannot write standard output: No space left on "
                                         "device\n"))
        << arguments[0] << ": " << result.err;
  }
}

// `-o -`: the file itself on standard output, the same bytes as in a file, and nothing else.
TEST_F(CommandOutputTest, dash_writes_the_file_to_standard_output) {
  const std::string trace = write_trace("job.trace", kRepeatedBlock);
  for (const std::string command : {"export", "report"}) {
    const std::string file = (root_ / (command + ".out")).string();
    const RunResult to_file = vramspill({command, trace, "-o", file});
    ASSERT_TRUE(to_file.exited(0)) << to_file.describe();
    EXPECT_TRUE(contains(to_file.out, "wrote " + file)) << to_file.out;
    const RunResult to_standard_output = vramspill({command, trace, "-o", "-"});
    ASSERT_TRUE(to_standard_output.exited(0)) << to_standard_output.describe();
    EXPECT_EQ(to_standard_output.out, read(file)) << command;
    EXPECT_FALSE(fs::exists(root_ / "-"));
    // /dev/stdout names this pipe through a link of /proc/self/fd, to no path: written in place.
    const RunResult through_dev_stdout = vramspill({command, trace, "-o", "/dev/stdout"});
    ASSERT_TRUE(through_dev_stdout.exited(0)) << through_dev_stdout.describe();
    EXPECT_TRUE(through_dev_stdout.out.starts_with(read(file))) << command;
    const RunResult help = vramspill({command, "--help"});
    EXPECT_TRUE(contains(help.out, "- for") && contains(help.out, "standard output")) << help.out;
  }
}

TEST_F(CommandOutputTest, replay_refuses_a_tiered_block_no_job_makes_by_its_line) {
  const std::string device = "100 device 0 1073741824 8388608\n";
  const std::vector<std::pair<std::string, std::string>> blocks = {
      {"0", "a tiered block of 0 bytes: tiered mode never makes one"},
      {"18446744073709551615",
       "an allocation of 18446744073709551615 bytes: more than any address space holds (2^57 "
       "bytes)"}};
  for (const auto& [bytes, problem] : blocks) {
    const std::string trace = write_trace(
        "block.trace", device + "200 alloc 0 tiered 0x1000 " + bytes + "\n300 use 0 0 0x1000\n");
    const RunResult result = vramspill({"replay", trace});
    EXPECT_TRUE(result.exited(2)) << bytes << ": " << result.describe();
    EXPECT_EQ(result.err, "vramspill replay: " + trace + ":6: " + problem + "\n");
  }
}

TEST_F(CommandOutputTest, export_refuses_a_device_no_driver_has_by_its_line) {
  const std::string trace = write_trace("device.trace",
                                        "100 device 2147483647 1073741824 8388608\n"
                                        "200 alloc 2147483647 cuMemAlloc 0x1000 4096\n");
  const RunResult result = vramspill({"export", trace, "-o", (root_ / "out.pickle").string()});
  EXPECT_TRUE(result.exited(2)) << result.describe();
  EXPECT_EQ(result.err, "vramspill export: " + trace +
                            ":5: device 2147483647 is out of range: expected 0 to 1023\n");
  EXPECT_FALSE(fs::exists(root_ / "out.pickle"));
}

// Note [Allocations a trace shows live]: replay says what export says of a damaged trace; and
// its use events are submissions (launches, copies, memsets), not the kernel launches that
// `report` counts.
TEST_F(CommandOutputTest, replay_counts_submissions_and_warns_of_an_allocation_at_a_live_base) {
  const std::string trace = write_trace("job.trace", kRepeatedBlock);
  const std::string warning = ": " + trace +
                              ": left out 1 allocation(s) of a key the trace shows live already "
                              "(is it damaged?)\n";
  const RunResult replayed = vramspill({"replay", trace, "--policy", "lru"});
  ASSERT_TRUE(replayed.exited(0)) << replayed.describe();
  EXPECT_EQ(replayed.err, "vramspill replay" + warning);
  EXPECT_TRUE(replayed.out.starts_with(trace + ", device 0: 1 tiered blocks (4.0 MiB), 1 "
                                                "submissions, budget 8.0 MiB (the job's)\n"))
      << replayed.out;
  const RunResult exported = vramspill({"export", trace, "-o", (root_ / "out.pickle").string()});
  EXPECT_EQ(exported.err, "vramspill export" + warning);
}

}  // namespace
