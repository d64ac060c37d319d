// [[tiered.rule]] in a policy file: what it reads, and each problem named with its place, the
// key, what was expected and the valid choices (README.md, "Rules for tiered blocks").
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "config/config.h"
#include "config_test_support.h"

namespace vramspill {
namespace {

using testing::load_toml;

// Loads `toml` and expects `message` as the whole error, "{file}" standing for the file's path.
void expect_error(const std::string& toml, std::string message) {
  std::string path;
  const ConfigResult result = load_toml(toml, path);
  ASSERT_FALSE(result.ok()) << toml;
  for (std::size_t at = message.find("{file}"); at != std::string::npos;
       at = message.find("{file}"))
    message.replace(at, 6, path);
  EXPECT_EQ(result.error().message, message);
}

TEST(TieredRulesConfig, RulesAreReadInTheFilesOrderWithTheirPlaces) {
  std::string path;
  const ConfigResult result = load_toml(
      "[spill]\nmode = \"tiered\"\n"
      "[[tiered.rule]]\naction = \"pin\"\nlibrary = \"libnccl*\"\n"
      "[[tiered.rule]]\naction = \"prefer_host\"\nmin_size = \"1GiB\"\nmax_size = 4294967296\n"
      "[[tiered.rule]]\naction = \"evict_first\"\nsymbol = \"*kv_cache*\"\n",
      path);
  ASSERT_TRUE(result.ok()) << result.error().message;
  const auto& rules = result.config().tiered.rules;
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].action, RuleAction::kPin);
  EXPECT_EQ(rules[0].library, "libnccl*");
  EXPECT_TRUE(rules[0].symbol.empty());
  EXPECT_EQ(rules[0].min_size, 0u);
  EXPECT_EQ(rules[0].max_size, UINT64_MAX);
  EXPECT_TRUE(rules[0].needs_call_site());
  EXPECT_EQ(rules[0].place, path + ":3:1");
  EXPECT_EQ(rules[1].action, RuleAction::kPreferHost);
  EXPECT_EQ(rules[1].min_size, uint64_t{1} << 30);
  EXPECT_EQ(rules[1].max_size, uint64_t{4} << 30);
  EXPECT_FALSE(rules[1].needs_call_site());
  EXPECT_EQ(rules[2].action, RuleAction::kEvictFirst);
  EXPECT_EQ(rules[2].symbol, "*kv_cache*");
}

TEST(TieredRulesConfig, NoRulesByDefault) {
  std::string path;
  const ConfigResult result = load_toml("[tiered]\npolicy = \"lru\"\n", path);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result.config().tiered.rules.empty());
}

TEST(TieredRulesConfig, BadActionListsTheChoices) {
  expect_error("[[tiered.rule]]\naction = \"pinn\"\n",
               "bad value 'pinn' for tiered.rule action at {file}:2:10; expected one of pin, "
               "prefer_host, evict_first (did you mean 'pin'?)");
}

TEST(TieredRulesConfig, MissingActionNamesTheRule) {
  expect_error("[tiered]\npolicy = \"lru\"\n\n[[tiered.rule]]\nlibrary = \"libnccl*\"\n",
               "[[tiered.rule]] at {file}:4:1 has no action; expected action = one of pin, "
               "prefer_host, evict_first");
}

TEST(TieredRulesConfig, UnknownKeyNamesTheKnownOnes) {
  expect_error("[[tiered.rule]]\naction = \"pin\"\nlibary = \"libnccl*\"\n",
               "unknown key 'libary' in [[tiered.rule]] at {file}:3:1; known keys: action, "
               "min_size, max_size, library, symbol (did you mean 'library'?)");
}

TEST(TieredRulesConfig, BadSizesAndTypes) {
  expect_error("[[tiered.rule]]\naction = \"pin\"\nmin_size = \"lots\"\n",
               "bad value 'lots' for tiered.rule min_size at {file}:3:12; expected a size such as "
               "8MiB, 1.5GB or 4096 (bytes; a string, or an integer)");
  expect_error("[[tiered.rule]]\naction = \"pin\"\nmax_size = -1\n",
               "bad value '-1' for tiered.rule max_size at {file}:3:12; expected a size such as "
               "8MiB, 1.5GB or 4096 (bytes; a string, or an integer)");
  expect_error("[[tiered.rule]]\naction = 1\n",
               "wrong type for tiered.rule action at {file}:2:10: got an integer, expected a "
               "string, one of pin, prefer_host, evict_first");
  expect_error("[[tiered.rule]]\naction = \"pin\"\nlibrary = \"\"\n",
               "empty tiered.rule library at {file}:3:11; expected a non-empty pattern with shell "
               "wildcards, such as \"libnccl*\" (leave the key out to match any)");
}

TEST(TieredRulesConfig, ASizeRangeThatMatchesNothing) {
  expect_error(
      "[[tiered.rule]]\naction = \"pin\"\nmin_size = \"2GiB\"\n"
      "max_size = \"1GiB\"\n",
      "[[tiered.rule]] at {file}:1:1: min_size 2.0 GiB is larger than max_size 1.0 GiB, so it "
      "could match nothing");
}

TEST(TieredRulesConfig, ATableInsteadOfAnArrayOfTables) {
  expect_error("[tiered.rule]\naction = \"pin\"\n",
               "'rule' in [tiered] at {file}:1:1 must be an array of tables, each written "
               "[[tiered.rule]]; got a table");
  expect_error("[tiered]\nrule = [\"pin\"]\n",
               "'rule' in [tiered] at {file}:2:8 must be an array of tables, each written "
               "[[tiered.rule]]; got an array of other values");
}

TEST(TieredRulesConfig, TheTieredSectionsUnknownKeyErrorKnowsRule) {
  expect_error("[tiered]\nrules = []\n",
               "unknown key 'rules' in [tiered] at {file}:2:1; known keys: policy, min_size, keep, "
               "window, stream_ordered, mover, admission, rule (did you mean 'rule'?)");
}

TEST(TieredRulesConfig, AtMostSixtyFourRules) {
  std::string rules;
  for (std::size_t i = 0; i <= kMaxTieredRules; ++i) rules += "[[tiered.rule]]\naction = \"pin\"\n";
  expect_error(rules, "too many [[tiered.rule]] entries at {file}:1:1: 65, expected at most 64");
}

TEST(TieredRulesConfig, EveryBadRuleIsReported) {
  std::string path;
  const ConfigResult result = load_toml(
      "[[tiered.rule]]\naction = \"x\"\n[[tiered.rule]]\naction = \"pin\"\n"
      "[[tiered.rule]]\nsymbol = 3\naction = \"pin\"\n",
      path);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().problems.size(), 2u) << result.error().message;
}

}  // namespace
}  // namespace vramspill
