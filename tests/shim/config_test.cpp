// load_config(): defaults, precedence (environment > file > default), typed values, and the
// conf/ examples.
#include "config/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <vector>

#include "config_test_support.h"
#include "policies/registry.h"

namespace vramspill {
namespace {

using testing::load;
using testing::load_toml;

constexpr uint64_t kGiB = 1ull << 30;

TEST(LoadConfig, DefaultsWithoutFileOrEnvironment) {
  const ConfigResult result = load({"HOME=/root", "PATH=/usr/bin"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  const Config& config = result.config();
  EXPECT_EQ(config.device.budget, Budget::fraction(1.0));
  EXPECT_EQ(config.device.reserve_bytes, 0u);
  EXPECT_EQ(config.spill.mode, SpillMode::kAuto);
  EXPECT_EQ(config.log.level, LogLevel::kInfo);
  EXPECT_EQ(config.log.file, "");
  EXPECT_TRUE(config.log.summary);
  EXPECT_EQ(config.source_file, "");
}

TEST(LoadConfig, SpillAndReportDefaults) {
  const ConfigResult result = load({});
  ASSERT_TRUE(result.ok()) << result.error().message;
  const Config& config = result.config();
  EXPECT_EQ(config.spill.min_size, 0u);
  EXPECT_EQ(config.spill.host_limit, Budget::fraction(0.5));
  EXPECT_EQ(config.spill.managed_location, ManagedLocation::kHost);
  EXPECT_TRUE(config.spill.managed_accessed_by);
  EXPECT_EQ(config.spill.host_pool_step, 256ull << 20);
  EXPECT_EQ(config.spill.host_pool_keep, kGiB);
  EXPECT_EQ(config.report.memory_info, MemoryInfo::kBudget);
  EXPECT_TRUE(config.log.stats);
}

TEST(LoadConfig, SpillOptionsFromFileAndEnvironment) {
  std::string path;
  const ConfigResult result = load_toml(
      "[spill]\nmode = \"host\"\nmin_size = \"2MiB\"\nhost_limit = \"8GiB\"\n"
      "managed_location = \"none\"\nmanaged_accessed_by = false\n"
      "[report]\nmemory_info = \"virtual\"\n",
      path, {"VRAMSPILL_SPILL_HOST_LIMIT=25%", "VRAMSPILL_SPILL_HOST_POOL_STEP=512MiB"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  const Config& config = result.config();
  EXPECT_EQ(config.spill.mode, SpillMode::kHost);
  EXPECT_EQ(config.spill.min_size, 2ull << 20);
  EXPECT_EQ(config.spill.host_limit, Budget::fraction(0.25));
  EXPECT_EQ(config.spill.managed_location, ManagedLocation::kNone);
  EXPECT_FALSE(config.spill.managed_accessed_by);
  EXPECT_EQ(config.spill.host_pool_step, 512ull << 20);
  EXPECT_EQ(config.report.memory_info, MemoryInfo::kVirtual);
}

TEST(LoadConfig, DefaultConfigMatchesAnEmptyLoad) {
  const Config defaults = default_config();
  const ConfigResult loaded = load({});
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(defaults.device.budget, loaded.config().device.budget);
  EXPECT_EQ(defaults.log.level, loaded.config().log.level);
  EXPECT_EQ(defaults.log.summary, loaded.config().log.summary);
}

// `vramspill run` reads VRAMSPILL_LIBRARY; a user who exports it must not break the shim.
TEST(LoadConfig, TheLibraryVariableIsNoError) {
  EXPECT_TRUE(load({"VRAMSPILL_LIBRARY=/opt/vramspill/lib/libvramspill.so"}).ok());
}

TEST(LoadConfig, NullEnvironmentMeansDefaults) { EXPECT_TRUE(load_config(nullptr).ok()); }

TEST(LoadConfig, FileBeatsDefault) {
  std::string path;
  const ConfigResult result = load_toml(
      "[device]\nbudget = \"20GiB\"\nreserve = 1073741824\n[log]\nlevel = \"debug\"\n"
      "summary = false\nfile = \"/tmp/vs.log\"\n",
      path);
  ASSERT_TRUE(result.ok()) << result.error().message;
  const Config& config = result.config();
  EXPECT_EQ(config.device.budget, Budget::bytes(20 * kGiB));
  EXPECT_EQ(config.device.reserve_bytes, kGiB);
  EXPECT_EQ(config.log.level, LogLevel::kDebug);
  EXPECT_FALSE(config.log.summary);
  EXPECT_EQ(config.log.file, "/tmp/vs.log");
  EXPECT_EQ(config.source_file, path);
}

// Non-ASCII characters outside the ranges toml++ 3.3.0 mishandles (Note [Characters toml++
// 3.3.0 mishandles] in shim/config/toml_prescan.h) are TOML's to judge: fine in comments and
// strings, and an escape stands for any.
TEST(LoadConfig, NonAsciiInCommentsAndStrings) {
  std::string path;
  const ConfigResult result = load_toml(
      "# \u65e5\u672c \U0001F600\n[log]\nfile = \"/tmp/\u65e5-\\u00e9.log\" # \u3000\n", path);
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().log.file, "/tmp/\u65e5-\u00e9.log");
}

TEST(LoadConfig, EnvironmentBeatsFile) {
  std::string path;
  const ConfigResult result =
      load_toml("[device]\nbudget = \"20GiB\"\n[log]\nlevel = \"debug\"\n", path,
                {"VRAMSPILL_DEVICE_BUDGET=45%", "VRAMSPILL_LOG_SUMMARY=off"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().device.budget, Budget::fraction(0.45));  // environment
  EXPECT_EQ(result.config().log.level, LogLevel::kDebug);            // file
  EXPECT_FALSE(result.config().log.summary);                         // environment
  EXPECT_EQ(result.config().device.reserve_bytes, 0u);               // default
}

TEST(LoadConfig, EnvironmentAloneWithoutFile) {
  const ConfigResult result = load({"VRAMSPILL_DEVICE_RESERVE=512MiB", "VRAMSPILL_LOG_LEVEL=off"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().device.reserve_bytes, 512ull << 20);
  EXPECT_EQ(result.config().log.level, LogLevel::kOff);
}

TEST(LoadConfig, EmptyConfigVariableMeansNoFile) {
  const ConfigResult result = load({"VRAMSPILL_CONFIG="});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().source_file, "");
}

TEST(LoadConfig, FirstOfDuplicateVariablesWins) {  // as getenv() does
  const ConfigResult result = load({"VRAMSPILL_LOG_LEVEL=warn", "VRAMSPILL_LOG_LEVEL=loud"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().log.level, LogLevel::kWarn);
}

TEST(LoadConfig, BooleanSpellingsInTheEnvironment) {
  for (const char* yes : {"true", "TRUE", "1", "yes", "on"}) {
    const ConfigResult result = load({std::string("VRAMSPILL_LOG_SUMMARY=") + yes});
    ASSERT_TRUE(result.ok()) << yes;
    EXPECT_TRUE(result.config().log.summary) << yes;
  }
  for (const char* no : {"false", "False", "0", "no", "off"}) {
    const ConfigResult result = load({std::string("VRAMSPILL_LOG_SUMMARY=") + no});
    ASSERT_TRUE(result.ok()) << no;
    EXPECT_FALSE(result.config().log.summary) << no;
  }
}

TEST(LoadConfig, ReadsTheProcessEnvironment) {
  ASSERT_EQ(setenv("VRAMSPILL_LOG_LEVEL", "error", 1), 0);
  const ConfigResult result = load_config();
  unsetenv("VRAMSPILL_LOG_LEVEL");
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().log.level, LogLevel::kError);
}

TEST(Budget, PercentStaysAFractionUntilResolved) {
  std::string path;
  const ConfigResult result = load_toml("[device]\nbudget = \"45%\"\nreserve = \"1GiB\"\n", path);
  ASSERT_TRUE(result.ok()) << result.error().message;
  const DeviceConfig& device = result.config().device;
  ASSERT_TRUE(device.budget.is_fraction());
  EXPECT_DOUBLE_EQ(device.budget.fraction_of_total(), 0.45);
  EXPECT_EQ(device.budget.resolve(100 * kGiB), 45 * kGiB);
  EXPECT_EQ(device.limit(100 * kGiB), 44 * kGiB);
}

TEST(Budget, ResolveAndLimit) {
  EXPECT_EQ(Budget::fraction(1.0).resolve(141 * kGiB + 7), 141 * kGiB + 7);  // 100% is exact
  EXPECT_EQ(Budget::fraction(0.5).resolve(3), 1u);                           // rounds down
  EXPECT_EQ(Budget::bytes(20 * kGiB).resolve(80 * kGiB), 20 * kGiB);
  EXPECT_EQ(Budget::bytes(200 * kGiB).resolve(80 * kGiB), 80 * kGiB);  // never above the device
  EXPECT_EQ(Budget::fraction(1.0).resolve(UINT64_MAX), UINT64_MAX);
  DeviceConfig device{Budget::fraction(0.01), 2 * kGiB};
  EXPECT_EQ(device.limit(100 * kGiB), 0u);  // a reserve above the budget leaves nothing
  device = DeviceConfig{Budget::bytes(10 * kGiB), kGiB};
  EXPECT_EQ(device.limit(80 * kGiB), 9 * kGiB);
}

TEST(Budget, IntegerAndDecimalSizes) {
  std::string path;
  ConfigResult result = load_toml("[device]\nbudget = 1000\n", path);
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().device.budget, Budget::bytes(1000));
  result = load({"VRAMSPILL_DEVICE_BUDGET=1.5GB"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().device.budget, Budget::bytes(1'500'000'000));
}

// Every example under conf/ loads cleanly (README.md, "Configuration": each one is loaded by a
// test).
TEST(ConfExamples, EveryFileLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(VRAMSPILL_CONF_DIR)) {
    if (entry.path().extension() != ".toml") continue;
    ++count;
    const ConfigResult result = load({"VRAMSPILL_CONFIG=" + entry.path().string()});
    EXPECT_TRUE(result.ok()) << entry.path() << ": " << result.error().message;
  }
  EXPECT_GE(count, 2) << "expected the examples in " << VRAMSPILL_CONF_DIR;
}

TEST(ConfExamples, SharedGpuSaysWhatItsCommentsSay) {
  const ConfigResult result =
      load({std::string("VRAMSPILL_CONFIG=") + VRAMSPILL_CONF_DIR + "/shared-gpu.toml"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().device.budget, Budget::fraction(0.45));
  EXPECT_EQ(result.config().device.reserve_bytes, kGiB);
}

TEST(ConfExamples, BudgetOnlyCapsAt20GiB) {
  const ConfigResult result =
      load({std::string("VRAMSPILL_CONFIG=") + VRAMSPILL_CONF_DIR + "/budget-only.toml"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().device.budget, Budget::bytes(20 * kGiB));
  EXPECT_EQ(result.config().spill.mode, SpillMode::kOff);
}

TEST(ConfExamples, TrainingSpillsAutomaticallyWithinAHostLimit) {
  const ConfigResult result =
      load({std::string("VRAMSPILL_CONFIG=") + VRAMSPILL_CONF_DIR + "/training.toml"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  const Config& config = result.config();
  EXPECT_EQ(config.device.budget, Budget::fraction(1.0));
  EXPECT_EQ(config.device.reserve_bytes, 2 * kGiB);
  EXPECT_EQ(config.spill.mode, SpillMode::kAuto);
  EXPECT_EQ(config.spill.managed_location, ManagedLocation::kHost);
  EXPECT_EQ(config.spill.host_limit, Budget::fraction(0.6));
  EXPECT_EQ(config.report.memory_info, MemoryInfo::kBudget);
}

TEST(ConfExamples, InferenceSpillsOnlyLargeBlocksToTheHostPool) {
  const ConfigResult result =
      load({std::string("VRAMSPILL_CONFIG=") + VRAMSPILL_CONF_DIR + "/inference.toml"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  const Config& config = result.config();
  EXPECT_EQ(config.device.budget, Budget::fraction(0.9));
  EXPECT_EQ(config.spill.mode, SpillMode::kHost);
  EXPECT_EQ(config.spill.min_size, 64ull << 20);
  EXPECT_EQ(config.spill.host_pool_step, 2 * kGiB);
  EXPECT_EQ(config.spill.host_pool_keep, 4 * kGiB);
  EXPECT_EQ(config.spill.host_limit, Budget::bytes(32 * kGiB));
}

TEST(ConfExamples, DemoSpillsOverA256MiBBudget) {
  const ConfigResult result =
      load({std::string("VRAMSPILL_CONFIG=") + VRAMSPILL_CONF_DIR + "/demo.toml"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().device.budget, Budget::bytes(256ull << 20));
  EXPECT_EQ(result.config().spill.mode, SpillMode::kAuto);
}

TEST(ConfExamples, TieredKeepsTheHotBlocksOnTheDevice) {
  const ConfigResult result =
      load({std::string("VRAMSPILL_CONFIG=") + VRAMSPILL_CONF_DIR + "/tiered.toml"});
  ASSERT_TRUE(result.ok()) << result.error().message;
  const Config& config = result.config();
  EXPECT_EQ(config.spill.mode, SpillMode::kTiered);
  EXPECT_EQ(config.tiered.policy, "lru");
  EXPECT_EQ(config.tiered.min_size, 1ull << 20);
  EXPECT_EQ(config.tiered.keep, 256ull << 20);
}

TEST(LoadConfig, TieredDefaults) {
  const ConfigResult result = load({});
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result.config().tiered.policy, "lru");
  EXPECT_EQ(result.config().tiered.min_size, 1ull << 20);
  EXPECT_EQ(result.config().tiered.keep, 64ull << 20);
}

TEST(LoadConfig, TraceFormatDefaultsToTextAndReadsBinary) {
  const ConfigResult defaults = load({});
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_EQ(defaults.config().trace.file, "");
  EXPECT_EQ(defaults.config().trace.format, TraceFormat::kText);
  std::string path;
  const ConfigResult from_file =
      load_toml("[trace]\nfile = \"/tmp/job.trace\"\nformat = \"binary\"\n", path);
  ASSERT_TRUE(from_file.ok()) << from_file.error().message;
  EXPECT_EQ(from_file.config().trace.file, "/tmp/job.trace");
  EXPECT_EQ(from_file.config().trace.format, TraceFormat::kBinary);
  const ConfigResult from_environment =
      load_toml("[trace]\nformat = \"binary\"\n", path, {"VRAMSPILL_TRACE_FORMAT=text"});
  ASSERT_TRUE(from_environment.ok()) << from_environment.error().message;
  EXPECT_EQ(from_environment.config().trace.format, TraceFormat::kText);
}

// [tiered] stream_ordered: the arena unless told, from the file or the environment, which wins.
TEST(LoadConfig, StreamOrderedRequestsGoToTheArenaUnlessToldOtherwise) {
  const ConfigResult defaults = load({});
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_EQ(defaults.config().tiered.stream_ordered, StreamOrderedMode::kArena);
  std::string path;
  const ConfigResult from_file = load_toml("[tiered]\nstream_ordered = \"pool\"\n", path);
  ASSERT_TRUE(from_file.ok()) << from_file.error().message;
  EXPECT_EQ(from_file.config().tiered.stream_ordered, StreamOrderedMode::kPool);
  const ConfigResult from_environment = load_toml("[tiered]\nstream_ordered = \"pool\"\n", path,
                                                  {"VRAMSPILL_TIERED_STREAM_ORDERED=arena"});
  ASSERT_TRUE(from_environment.ok()) << from_environment.error().message;
  EXPECT_EQ(from_environment.config().tiered.stream_ordered, StreamOrderedMode::kArena);
  const ConfigResult unknown = load({"VRAMSPILL_TIERED_STREAM_ORDERED=cache"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("arena"), std::string::npos) << unknown.error().message;
}

// [tiered] mover: remap unless told, from the file or the environment, which wins.
TEST(LoadConfig, TieredBlocksAreRemappedUnlessThePrefetchMoverIsAskedFor) {
  const ConfigResult defaults = load({});
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_EQ(defaults.config().tiered.mover, TieredMover::kRemap);
  std::string path;
  const ConfigResult from_file = load_toml("[tiered]\nmover = \"prefetch\"\n", path);
  ASSERT_TRUE(from_file.ok()) << from_file.error().message;
  EXPECT_EQ(from_file.config().tiered.mover, TieredMover::kPrefetch);
  const ConfigResult from_environment =
      load_toml("[tiered]\nmover = \"prefetch\"\n", path, {"VRAMSPILL_TIERED_MOVER=remap"});
  ASSERT_TRUE(from_environment.ok()) << from_environment.error().message;
  EXPECT_EQ(from_environment.config().tiered.mover, TieredMover::kRemap);
}

// [tiered] admission: weighed unless told, from the file or the environment, which wins.
TEST(LoadConfig, ThePrefetchMoverWeighsItsPromotionsUnlessToldToMakeThemAll) {
  const ConfigResult defaults = load({});
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_EQ(defaults.config().tiered.admission, TieredAdmission::kWeighed);
  std::string path;
  const ConfigResult from_file = load_toml("[tiered]\nadmission = \"always\"\n", path);
  ASSERT_TRUE(from_file.ok()) << from_file.error().message;
  EXPECT_EQ(from_file.config().tiered.admission, TieredAdmission::kAlways);
  const ConfigResult from_environment = load_toml("[tiered]\nadmission = \"always\"\n", path,
                                                  {"VRAMSPILL_TIERED_ADMISSION=weighed"});
  ASSERT_TRUE(from_environment.ok()) << from_environment.error().message;
  EXPECT_EQ(from_environment.config().tiered.admission, TieredAdmission::kWeighed);
}

// The config layer cannot reach the policy registry: its list of names is held to it here.
TEST(LoadConfig, TieredPolicyNamesAreTheRegistrys) {
  const auto registered = policies::policy_names();
  EXPECT_EQ(std::vector<std::string_view>(kTieredPolicyNames.begin(), kTieredPolicyNames.end()),
            std::vector<std::string_view>(registered.begin(), registered.end()));
}

TEST(LoadConfig, AnUnknownTieredPolicyListsTheValidOnes) {
  const ConfigResult result = load({"VRAMSPILL_TIERED_POLICY=belady"});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find("lru"), std::string::npos) << result.error().message;
}

}  // namespace
}  // namespace vramspill
