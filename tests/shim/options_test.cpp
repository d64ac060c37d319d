// The options table itself: complete documentation, valid defaults, derived names, the README
// table, and the "did you mean" matcher.
#include "config/options.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "config/suggest.h"

namespace vramspill {
namespace {

TEST(OptionsTable, EveryOptionIsDocumented) {
  for (const OptionSpec& option : options()) {
    const std::string name = option_name(option);
    EXPECT_FALSE(option.doc.empty()) << name << " has no documentation";
    // One Markdown table cell: one line, no column separator.
    EXPECT_EQ(option.doc.find('\n'), std::string_view::npos) << name;
    EXPECT_EQ(option.doc.find('|'), std::string_view::npos) << name;
    EXPECT_TRUE(option.doc.ends_with('.')) << name << ": end the sentence";
  }
}

TEST(OptionsTable, EveryDefaultParsesAndStores) {
  for (const OptionSpec& option : options()) {
    const ParsedOption parsed = parse_option_text(option, option.default_text);
    ASSERT_TRUE(parsed.ok()) << option_name(option) << ": " << parsed.problem;
    Config config;
    option.store(config, *parsed.value);  // throws bad_variant_access on a type mix-up
  }
}

TEST(OptionsTable, EnumsHaveChoicesAndOthersDoNot) {
  for (const OptionSpec& option : options())
    EXPECT_EQ(option.type == OptionType::kEnum, !option.choices.empty()) << option_name(option);
}

TEST(OptionsTable, NamesAreUniqueAndDerived) {
  std::set<std::string> names;
  std::set<std::string> variables;
  for (const OptionSpec& option : options()) {
    EXPECT_TRUE(names.insert(option_name(option)).second) << option_name(option);
    EXPECT_TRUE(variables.insert(env_name(option)).second) << env_name(option);
    EXPECT_NE(env_name(option), kConfigFileVariable);
    bool section_listed = false;
    for (std::string_view section : option_sections()) section_listed |= section == option.section;
    EXPECT_TRUE(section_listed) << option_name(option);
  }
  const OptionSpec* budget = find_option("device", "budget");
  ASSERT_NE(budget, nullptr);
  EXPECT_EQ(env_name(*budget), "VRAMSPILL_DEVICE_BUDGET");
  EXPECT_EQ(option_name(*budget), "device.budget");
  EXPECT_EQ(find_option("device", "nope"), nullptr);
}

TEST(OptionsTable, MarkdownHasAHeaderAndOneRowPerOption) {
  const std::string table = options_markdown_table();
  EXPECT_TRUE(table.starts_with("| Key | Environment variable | Type | Default | Meaning |\n"));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'),
            static_cast<std::ptrdiff_t>(options().size() + 2));
  EXPECT_NE(
      table.find("| `device.budget` | `VRAMSPILL_DEVICE_BUDGET` | size or percent | `100%` |"),
      std::string::npos);
  EXPECT_NE(table.find("| `log.file` | `VRAMSPILL_LOG_FILE` | path | empty |"), std::string::npos);
}

TEST(OptionValues, IntegerType) {  // no option uses it yet; the type is ready for one
  const OptionSpec spec{"test", "count", OptionType::kInteger, "0", "A count.", {}, nullptr};
  EXPECT_EQ(std::get<int64_t>(*parse_option_text(spec, "-42").value), -42);
  EXPECT_FALSE(parse_option_text(spec, "4x").ok());
  EXPECT_FALSE(parse_option_text(spec, "").ok());
  EXPECT_FALSE(parse_option_text(spec, "99999999999999999999").ok());
}

TEST(ClosestMatch, TyposButNotStrangers) {
  const std::vector<std::string> keys = {"budget", "reserve"};
  EXPECT_EQ(closest_match("budjet", keys), "budget");
  EXPECT_EQ(closest_match("BUDGET", keys), "budget");
  EXPECT_EQ(closest_match("reserv", keys), "reserve");
  EXPECT_EQ(closest_match("colour", keys), std::nullopt);
  EXPECT_EQ(closest_match("", keys), std::nullopt);
  const std::vector<std::string> short_names = {"on", "off"};
  EXPECT_EQ(closest_match("xy", short_names), std::nullopt);  // two edits of two letters
}

}  // namespace
}  // namespace vramspill
