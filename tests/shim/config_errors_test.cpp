// The shape of every load_config() error: where (file:line:column or the variable), the key,
// what was expected, and the valid choices or a close match.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config_test_support.h"

namespace vramspill {
namespace {

using ::testing::HasSubstr;
using testing::load;
using testing::load_toml;

// The error message for `toml` as the config file; `path` receives the file's path.
std::string toml_error(const std::string& toml, std::string& path,
                       std::vector<std::string> environment = {}) {
  const ConfigResult result = load_toml(toml, path, std::move(environment));
  EXPECT_FALSE(result.ok()) << toml;
  return result.ok() ? "" : result.error().message;
}

std::string env_error(std::vector<std::string> environment) {
  const ConfigResult result = load(std::move(environment));
  EXPECT_FALSE(result.ok());
  return result.ok() ? "" : result.error().message;
}

TEST(ConfigErrors, UnknownKeyNamesPlaceKnownKeysAndCloseMatch) {
  std::string path;
  const std::string message = toml_error("[device]\nbudget = \"1GiB\"\nbudjet = \"2GiB\"\n", path);
  EXPECT_EQ(message, "unknown key 'budjet' in [device] at " + path +
                         ":3:1; known keys: budget, reserve (did you mean 'budget'?)");
}

TEST(ConfigErrors, UnknownKeyWithoutCloseMatch) {
  std::string path;
  const std::string message = toml_error("[log]\ncolour = true\n", path);
  EXPECT_EQ(message,
            "unknown key 'colour' in [log] at " + path + ":2:1; known keys: level, file, summary, stats");
}

TEST(ConfigErrors, UnknownSection) {
  std::string path;
  const std::string message = toml_error("[devise]\nbudget = \"1GiB\"\n", path);
  EXPECT_EQ(message, "unknown section [devise] at " + path +
                         ":1:2; known sections: device, spill, tiered, report, log, trace (did "
                         "you mean [device]?)");
}

TEST(ConfigErrors, KeyOutsideAnySection) {
  std::string path;
  const std::string message = toml_error("budget = \"1GiB\"\n", path);
  EXPECT_EQ(message,
            "key 'budget' at " + path + ":1:1 is outside any section; it belongs in [device]");
}

TEST(ConfigErrors, SectionThatIsNotATable) {
  std::string path;
  const std::string message = toml_error("device = 5\n", path);
  EXPECT_EQ(message, "'device' at " + path + ":1:1 must be a section ([device]), not an integer");
}

TEST(ConfigErrors, WrongType) {
  std::string path;
  const std::string message = toml_error("[log]\nsummary = \"yes\"\n", path);
  EXPECT_EQ(message, "wrong type for log.summary at " + path +
                         ":2:11: got a string, expected true or false");
}

TEST(ConfigErrors, FloatIsNotASize) {
  std::string path;
  const std::string message = toml_error("[device]\nbudget = 0.9\n", path);
  EXPECT_THAT(message, HasSubstr("wrong type for device.budget at " + path + ":2:10"));
  EXPECT_THAT(message, HasSubstr("got a floating-point number, expected a size"));
  EXPECT_THAT(message, HasSubstr("(90%)"));
}

TEST(ConfigErrors, BadSize) {
  std::string path;
  const std::string message = toml_error("[device]\nreserve = \"lots\"\n", path);
  EXPECT_EQ(message, "bad value 'lots' for device.reserve at " + path +
                         ":2:11: not a size; expected a size in bytes, optionally with a unit: "
                         "123, 512MiB, 20GiB, 1.5GB");
}

TEST(ConfigErrors, NegativeSize) {
  std::string path;
  const std::string message = toml_error("[device]\nreserve = -1\n", path);
  EXPECT_THAT(message, HasSubstr("bad value -1 for device.reserve at " + path + ":2:11: negative"));
}

TEST(ConfigErrors, PercentOutOfRangeAndZeroBudget) {
  std::string path;
  EXPECT_THAT(toml_error("[device]\nbudget = \"150%\"\n", path),
              HasSubstr("a percent must be above 0 and at most 100"));
  EXPECT_THAT(toml_error("[device]\nbudget = \"0%\"\n", path),
              HasSubstr("a percent must be above 0 and at most 100"));
  EXPECT_THAT(toml_error("[device]\nbudget = 0\n", path),
              HasSubstr("bad value '0' for device.budget at " + path + ":2:10: 0 bytes allows nothing"));
  EXPECT_THAT(env_error({"VRAMSPILL_SPILL_HOST_LIMIT=0"}),
              HasSubstr("bad value '0' for spill.host_limit in VRAMSPILL_SPILL_HOST_LIMIT: 0 bytes "
                        "allows nothing; expected a size"));
}

// Note [A size in bytes is whole] in shim/util/sizes.cpp: "0.9" meant 90%, and was a budget of
// 1 byte ("0.5") or refused only for being 0 ("0.4").
TEST(ConfigErrors, AFractionOfAByteIsAShareWrittenWrong) {
  std::string path;
  const std::string message = toml_error("[device]\nbudget = \"0.5\"\n", path);
  EXPECT_THAT(message,
              HasSubstr("bad value '0.5' for device.budget at " + path +
                        ":2:10: not a whole number of bytes (a share is a percent, like 90%)"));
  EXPECT_THAT(env_error({"VRAMSPILL_SPILL_HOST_LIMIT=0.9"}),
              HasSubstr("bad value '0.9' for spill.host_limit in VRAMSPILL_SPILL_HOST_LIMIT: not a "
                        "whole number of bytes (a share is a percent, like 90%)"));
}

TEST(ConfigErrors, EnumListsTheValidChoices) {
  std::string path;
  const std::string message = toml_error("[spill]\nmode = \"disk\"\n", path);
  EXPECT_EQ(message, "bad value 'disk' for spill.mode at " + path +
                         ":2:8: not a valid choice; expected one of: off, managed, host, auto, tiered");
  EXPECT_EQ(env_error({"VRAMSPILL_LOG_LEVEL=loud"}),
            "bad value 'loud' for log.level in VRAMSPILL_LOG_LEVEL: not a valid choice; "
            "expected one of: trace, debug, info, warn, error, off");
}

TEST(ConfigErrors, TraceFormatListsTheValidChoices) {
  std::string path;
  const std::string message = toml_error("[trace]\nformat = \"jsonl\"\n", path);
  EXPECT_EQ(message, "bad value 'jsonl' for trace.format at " + path +
                         ":2:10: not a valid choice; expected one of: text, binary");
  EXPECT_EQ(env_error({"VRAMSPILL_TRACE_FORMAT=Binary!"}),
            "bad value 'Binary!' for trace.format in VRAMSPILL_TRACE_FORMAT: not a valid choice; "
            "expected one of: text, binary");
}

TEST(ConfigErrors, TieredMoverListsTheValidChoices) {
  std::string path;
  const std::string message = toml_error("[tiered]\nmover = \"migrate\"\n", path);
  EXPECT_EQ(message, "bad value 'migrate' for tiered.mover at " + path +
                         ":2:9: not a valid choice; expected one of: remap, prefetch");
  EXPECT_EQ(env_error({"VRAMSPILL_TIERED_MOVER=Prefetch"}),
            "bad value 'Prefetch' for tiered.mover in VRAMSPILL_TIERED_MOVER: not a valid "
            "choice; expected one of: remap, prefetch");
}

TEST(ConfigErrors, SyntaxErrorNamesThePlaceAndHowToWriteSizes) {
  std::string path;
  const std::string message = toml_error("[device]\nbudget = 20GiB\n", path);
  EXPECT_THAT(message, HasSubstr("TOML syntax error at " + path + ":2:"));
  EXPECT_THAT(message, HasSubstr("budget = \"20GiB\""));
}

// Note [Characters toml++ 3.3.0 mishandles] in shim/config/toml_prescan.h: refused before
// toml++, whose 3.3.0 reaches undefined behaviour on them, wherever they stand.
TEST(ConfigErrors, CharactersTomlMishandlesAreRefusedWithTheirPlace) {
  std::string path;
  const std::string message = toml_error("[device]\nbudg\u00e9t = \"1GiB\"\n", path);
  EXPECT_EQ(message, "character U+00E9 at " + path +
                         ":2:5 is refused: the TOML library vramspill is built with (toml++ "
                         "3.3.0) misreads it; keys are ASCII in TOML, and in a \"double-quoted\" "
                         "string write it as \\u00E9");
  // After a malformed value (the fuzzer's find), and in a comment after a CJK character.
  const std::string after_value = toml_error("[log]\nlevel =-\"d\u00e9bug\"\n", path);
  EXPECT_THAT(after_value, HasSubstr("character U+00E9 at " + path + ":2:11 is refused"));
  const std::string in_comment = toml_error("[log] # \u65e5 \u0416\n", path);
  EXPECT_THAT(in_comment, HasSubstr("character U+0416 at " + path + ":1:11 is refused"));
}

TEST(ConfigErrors, MissingFile) {
  const std::string message = env_error({"VRAMSPILL_CONFIG=/nonexistent/job.toml"});
  EXPECT_EQ(message,
            "cannot read the config file '/nonexistent/job.toml' (VRAMSPILL_CONFIG): No such file "
            "or directory");
}

// Note [Only regular files]: a named pipe must not block the job (nobody writes to it), a
// device must not be read without end, a directory is never a policy. Each is refused at once,
// saying what the path is.
TEST(ConfigErrors, PolicyThatIsNotARegularFile) {
  const std::string fifo = ::testing::TempDir() + "vramspill_ConfigErrors_policy.fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string directory = ::testing::TempDir();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "a pipe"}, {"/dev/zero", "a character device"}, {directory, "a directory"}};
  for (const auto& [path, what] : cases) {
    EXPECT_EQ(env_error({"VRAMSPILL_CONFIG=" + path}),
              "cannot read the config file '" + path + "' (VRAMSPILL_CONFIG): it is " + what +
                  ", not a regular file");
  }
}

// Note [The policy's size limit]: 1 MiB at most, however the file looks.
TEST(ConfigErrors, PolicyOverTheSizeLimit) {
  const std::string comment_line = "# " + std::string(1022, 'x') + "\n";  // 1 KiB a line
  std::string text = "[log]\nlevel = \"warn\"\n";
  while (text.size() <= (std::size_t{1} << 20)) text += comment_line;
  std::string path;
  const std::string message = toml_error(text, path);
  EXPECT_EQ(message,
            "cannot read the config file '" + path +
                "' (VRAMSPILL_CONFIG): it is larger than 1 MiB, too large for a policy (a policy "
                "is a few KiB)");
  // Just under the limit is a policy like any other.
  text.resize((std::size_t{1} << 20) - comment_line.size());
  text.resize(text.rfind('\n') + 1);
  const ConfigResult result = load_toml(text, path);
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().log.level, LogLevel::kWarn);
}

TEST(ConfigErrors, UnknownEnvironmentVariable) {
  const std::string message = env_error({"VRAMSPILL_DEVICE_BUDJET=1GiB"});
  EXPECT_THAT(message, HasSubstr("unknown environment variable VRAMSPILL_DEVICE_BUDJET; known: "
                                 "VRAMSPILL_CONFIG, VRAMSPILL_LIBRARY, VRAMSPILL_DEVICE_BUDGET, "));
  EXPECT_THAT(message, HasSubstr("(did you mean VRAMSPILL_DEVICE_BUDGET?)"));
}

TEST(ConfigErrors, OtherVariablesAreNotOurs) {
  EXPECT_TRUE(load({"VRAMSPILLX=1", "MY_VRAMSPILL_THING=2", "SIMCUDA_VRAM=1GiB"}).ok());
}

TEST(ConfigErrors, BadEnvironmentValue) {
  EXPECT_EQ(env_error({"VRAMSPILL_DEVICE_BUDGET=much"}),
            "bad value 'much' for device.budget in VRAMSPILL_DEVICE_BUDGET: not a size; expected a "
            "size (123, 512MiB, 20GiB, 1.5GB) or a percent of the device's memory (90%)");
  EXPECT_THAT(env_error({"VRAMSPILL_LOG_SUMMARY=maybe"}),
              HasSubstr("for log.summary in VRAMSPILL_LOG_SUMMARY: not a boolean"));
}

TEST(ConfigErrors, ReserveSwallowingTheBudget) {
  std::string path;
  const std::string message =
      toml_error("[device]\nbudget = \"1GiB\"\n", path, {"VRAMSPILL_DEVICE_RESERVE=2GiB"});
  EXPECT_EQ(message,
            "device.reserve = 2GiB in VRAMSPILL_DEVICE_RESERVE is not less than "
            "device.budget = 1GiB at " +
                path + ":2:10: nothing would be left to allocate");
}

// Note [A budget that leaves nothing]: only the device's size tells; the message has the figures.
TEST(ConfigErrors, BudgetThatLeavesADeviceNothing) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  DeviceConfig device;
  device.budget = Budget::fraction(0.5);
  device.reserve_bytes = 600 << 20;
  EXPECT_EQ(device.nothing_left(kGiB),
            "device.budget = 50% of the device's 1.0 GiB (1073741824 bytes) is 512.0 MiB, and "
            "device.reserve = 600.0 MiB is kept free below it: nothing is left to allocate "
            "(every allocation would be refused); lower device.reserve or raise device.budget");
  EXPECT_EQ(device.nothing_left(2 * kGiB), "");  // 1 GiB - 600 MiB is left

  device.budget = Budget::bytes(4 * kGiB);
  device.reserve_bytes = kGiB;
  EXPECT_THAT(device.nothing_left(kGiB),
              HasSubstr("device.budget = 4.0 GiB is capped at the device's 1.0 GiB (1073741824 "
                        "bytes), and device.reserve = 1.0 GiB is kept free below it"));
  EXPECT_EQ(device.nothing_left(2 * kGiB), "");
}

// A user fixing a file sees every problem at once, one per line: file, then environment.
TEST(ConfigErrors, AllProblemsAreReported) {
  std::string path;
  const std::string message = toml_error("[device]\nbudjet = 1\n[log]\nlevel = \"loud\"\n", path,
                                         {"VRAMSPILL_SPILL_MOD=off"});
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 2) << message;
  const ConfigResult result =
      load_toml("[device]\nbudjet = 1\n", path, {"VRAMSPILL_SPILL_MOD=off"});
  ASSERT_FALSE(result.ok());
  ASSERT_EQ(result.error().problems.size(), 2u);
  EXPECT_EQ(result.error().message, result.error().problems[0] + "\n" + result.error().problems[1]);
  EXPECT_THAT(message, HasSubstr("unknown environment variable VRAMSPILL_SPILL_MOD"));
  EXPECT_THAT(message, HasSubstr("unknown key 'budjet'"));
  EXPECT_THAT(message, HasSubstr("bad value 'loud' for log.level at " + path + ":4:9"));
}

// The environment beats the file, but a bad file is still an error.
TEST(ConfigErrors, BadFileValueIsAnErrorEvenWhenOverridden) {
  std::string path;
  EXPECT_THAT(toml_error("[log]\nlevel = \"loud\"\n", path, {"VRAMSPILL_LOG_LEVEL=info"}),
              HasSubstr("bad value 'loud' for log.level"));
}

}  // namespace
}  // namespace vramspill
