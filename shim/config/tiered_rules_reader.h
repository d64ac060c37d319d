// Reads the [[tiered.rule]] entries of a policy file (README.md, "Rules for tiered blocks").
// They are not rows of the options table: a rule is a table of keys, there may be any number of
// them, and they have no VRAMSPILL_* variable (a rule is a list, and an environment variable
// would have to encode it); so this reader checks them and reports its problems in the same
// shape as load_config() does for options.
#pragma once

#include <toml++/toml.h>

#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace vramspill {

// The key in [tiered] that holds the rules.
inline constexpr std::string_view kTieredRuleKey = "rule";

// The rules in `node`, the value of [tiered] rule in `file`. Each problem is appended to
// `errors`, naming its place (file:line:column), the key, what was expected and the valid
// choices; a rule with a problem is left out.
std::vector<TieredRule> read_tiered_rules(const toml::node& node, std::string_view file,
                                          std::vector<std::string>& errors);

}  // namespace vramspill
