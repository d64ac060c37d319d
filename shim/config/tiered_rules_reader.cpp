#include "config/tiered_rules_reader.h"

#include <algorithm>
#include <array>
#include <optional>

#include "config/toml_text.h"
#include "util/bytes.h"
#include "util/sizes.h"

namespace vramspill {
namespace {

using config_text::describe;
using config_text::did_you_mean;
using config_text::join;
using config_text::quoted;

constexpr std::array<std::string_view, 5> kRuleKeys = {"action", "min_size", "max_size", "library",
                                                       "symbol"};
constexpr std::string_view kRuleName = "[[tiered.rule]]";

class RuleReader {
 public:
  RuleReader(std::string_view file, std::vector<std::string>& errors)
      : file_(file), errors_(errors) {}

  std::optional<TieredRule> read(const toml::table& table) {
    TieredRule rule;
    rule.place = config_text::where(file_, table.source());
    bool has_action = false;
    const std::size_t errors_before = errors_.size();
    for (const auto& [key, node] : table) {
      const std::string_view name = key.str();
      const std::string at = config_text::where(file_, node.source());
      if (name == "action") {
        has_action = read_action(node, at, rule.action);
      } else if (name == "min_size") {
        read_size(name, node, at, rule.min_size);
      } else if (name == "max_size") {
        read_size(name, node, at, rule.max_size);
      } else if (name == "library") {
        read_pattern(name, node, at, rule.library);
      } else if (name == "symbol") {
        read_pattern(name, node, at, rule.symbol);
      } else {
        const std::vector<std::string> known(kRuleKeys.begin(), kRuleKeys.end());
        errors_.push_back("unknown key " + quoted(name) + " in " + std::string(kRuleName) + " at " +
                          config_text::where(file_, key.source()) + "; known keys: " +
                          join(known, ", ") + did_you_mean(name, known, "'", "'"));
      }
    }
    if (!has_action && errors_.size() == errors_before)
      errors_.push_back(std::string(kRuleName) + " at " + rule.place +
                        " has no action; expected action = one of " + action_choices());
    if (rule.min_size > rule.max_size)
      errors_.push_back(std::string(kRuleName) + " at " + rule.place + ": min_size " +
                        format_bytes(rule.min_size) + " is larger than max_size " +
                        format_bytes(rule.max_size) + ", so it could match nothing");
    if (errors_.size() != errors_before) return std::nullopt;
    return rule;
  }

 private:
  static std::string action_choices() {
    return join(std::vector<std::string>(kRuleActionNames.begin(), kRuleActionNames.end()), ", ");
  }

  void wrong_type(std::string_view key, const toml::node& node, const std::string& at,
                  std::string_view expected) {
    errors_.push_back("wrong type for tiered.rule " + std::string(key) + " at " + at + ": got " +
                      std::string(describe(node.type())) + ", expected " + std::string(expected));
  }

  bool read_action(const toml::node& node, const std::string& at, RuleAction& action) {
    const auto* text = node.as_string();
    if (text == nullptr) {
      wrong_type("action", node, at, "a string, one of " + action_choices());
      return false;
    }
    const auto found = std::ranges::find(kRuleActionNames, text->get());
    if (found == kRuleActionNames.end()) {
      const std::vector<std::string> known(kRuleActionNames.begin(), kRuleActionNames.end());
      errors_.push_back("bad value " + quoted(text->get()) + " for tiered.rule action at " + at +
                        "; expected one of " + action_choices() +
                        did_you_mean(text->get(), known, "'", "'"));
      return false;
    }
    action = static_cast<RuleAction>(found - kRuleActionNames.begin());
    return true;
  }

  void read_size(std::string_view key, const toml::node& node, const std::string& at,
                 uint64_t& size) {
    static constexpr std::string_view kExpected =
        "a size such as 8MiB, 1.5GB or 4096 (bytes; a string, or an integer)";
    std::string spelled;
    if (const auto* integer = node.as_integer()) {
      spelled = std::to_string(integer->get());
    } else if (const auto* text = node.as_string()) {
      spelled = text->get();
    } else {
      wrong_type(key, node, at, kExpected);
      return;
    }
    const std::optional<uint64_t> parsed = parse_size(spelled);
    if (!parsed) {
      errors_.push_back("bad value " + quoted(spelled) + " for tiered.rule " + std::string(key) +
                        " at " + at + "; expected " + std::string(kExpected));
      return;
    }
    size = *parsed;
  }

  void read_pattern(std::string_view key, const toml::node& node, const std::string& at,
                    std::string& pattern) {
    static constexpr std::string_view kExpected =
        "a non-empty pattern with shell wildcards, such as \"libnccl*\"";
    const auto* text = node.as_string();
    if (text == nullptr) {
      wrong_type(key, node, at, kExpected);
      return;
    }
    if (text->get().empty()) {
      errors_.push_back("empty tiered.rule " + std::string(key) + " at " + at + "; expected " +
                        std::string(kExpected) + " (leave the key out to match any)");
      return;
    }
    pattern = text->get();
  }

  std::string_view file_;
  std::vector<std::string>& errors_;
};

}  // namespace

std::vector<TieredRule> read_tiered_rules(const toml::node& node, std::string_view file,
                                          std::vector<std::string>& errors) {
  const toml::array* entries = node.as_array();
  const bool all_tables =
      entries != nullptr &&
      std::ranges::all_of(*entries, [](const toml::node& entry) { return entry.is_table(); });
  if (!all_tables) {
    errors.push_back("'rule' in [tiered] at " + config_text::where(file, node.source()) +
                     " must be an array of tables, each written [[tiered.rule]]; got " +
                     (entries != nullptr ? std::string("an array of other values")
                                         : std::string(describe(node.type()))));
    return {};
  }
  if (entries->size() > kMaxTieredRules) {
    errors.push_back(
        "too many [[tiered.rule]] entries at " + config_text::where(file, node.source()) + ": " +
        std::to_string(entries->size()) + ", expected at most " + std::to_string(kMaxTieredRules));
    return {};
  }
  std::vector<TieredRule> rules;
  RuleReader reader(file, errors);
  for (const toml::node& entry : *entries) {
    if (std::optional<TieredRule> rule = reader.read(*entry.as_table()))
      rules.push_back(std::move(*rule));
  }
  return rules;
}

}  // namespace vramspill
