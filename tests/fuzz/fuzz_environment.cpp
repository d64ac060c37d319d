// libFuzzer target: the VRAMSPILL_* environment variables, read by load_config(). The input is
// the environment, one NAME=VALUE entry per line ('\n' or NUL ends an entry, as no entry of a
// real environment can hold either). Besides "no crash, no leak, no undefined behaviour, no
// exception" (load_config() is noexcept: one would abort), it checks load_config()'s verdict
// against one worked out from the options table alone:
//  - only entries named VRAMSPILL_* count, and of duplicates only the first (getenv()'s rule);
//  - it fails exactly when some counted entry is unknown or its value does not parse as its
//    option's type, or a size device.reserve is not below a size device.budget, with one
//    problem for each, every one a printable line naming its variable;
//  - when it succeeds, device.budget and device.reserve are the environment's (else defaults).
// VRAMSPILL_CONFIG's value is dropped (so that the input cannot make it read a file);
// fuzz_policy covers the file.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/options.h"
#include "fuzz_checks.h"

namespace vramspill::fuzz {
namespace {

std::vector<std::string> entries_of(std::string_view text) {
  std::vector<std::string> entries;
  std::size_t start = 0;
  for (std::size_t at = 0; at <= text.size(); ++at) {
    if (at < text.size() && text[at] != '\n' && text[at] != '\0') continue;
    std::string entry(text.substr(start, at - start));
    if (entry.starts_with(std::string(kConfigFileVariable) + "="))
      entry = std::string(kConfigFileVariable) + "=";
    entries.push_back(std::move(entry));
    start = at + 1;
  }
  return entries;
}

// The value `option` has by default, parsed as load_config() parses it.
OptionValue default_value(const OptionSpec& option) {
  ParsedOption parsed = parse_option_text(option, option.default_text);
  require(parsed.ok(), "every default parses", option.default_text);
  return *parsed.value;
}

// What load_config() should make of `entries`.
struct Expected {
  std::size_t problems = 0;
  Budget budget;
  uint64_t reserve = 0;
};

Expected expect(const std::vector<std::string>& entries) {
  const OptionSpec* budget_option = find_option("device", "budget");
  const OptionSpec* reserve_option = find_option("device", "reserve");
  require(budget_option != nullptr && reserve_option != nullptr,
          "device.budget and .reserve exist");
  Expected expected{0, std::get<Budget>(default_value(*budget_option)),
                    std::get<uint64_t>(default_value(*reserve_option))};
  std::vector<std::string_view> seen;
  for (const std::string& entry : entries) {
    const std::size_t equals = entry.find('=');
    if (equals == std::string::npos) continue;
    const std::string_view name = std::string_view(entry).substr(0, equals);
    const std::string_view value = std::string_view(entry).substr(equals + 1);
    if (!name.starts_with("VRAMSPILL_")) continue;
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    if (name == kConfigFileVariable || name == kLibraryVariable) continue;
    const OptionSpec* option = nullptr;
    for (const OptionSpec& candidate : options())
      if (env_name(candidate) == name) option = &candidate;
    if (option == nullptr) {
      ++expected.problems;
      continue;
    }
    const ParsedOption parsed = parse_option_text(*option, value);
    if (!parsed.ok()) {
      ++expected.problems;
      continue;
    }
    if (option == budget_option) expected.budget = std::get<Budget>(*parsed.value);
    if (option == reserve_option) expected.reserve = std::get<uint64_t>(*parsed.value);
  }
  if (!expected.budget.is_fraction() && expected.reserve >= expected.budget.byte_count())
    ++expected.problems;
  return expected;
}

}  // namespace
}  // namespace vramspill::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace vramspill::fuzz;
  const std::vector<std::string> entries =
      entries_of(std::string_view(reinterpret_cast<const char*>(data), size));
  const Expected expected = expect(entries);
  const vramspill::ConfigResult result = load_with(entries);
  if (!result.ok()) {
    const vramspill::ConfigError& error = result.error();
    check_error_lines(error);
    require(error.problems.size() == expected.problems,
            "one problem per bad variable (and one for reserve >= budget)", error.message);
    for (const std::string& problem : error.problems)
      require(problem.find("VRAMSPILL_") != std::string::npos, "every problem names its variable",
              problem);
    return 0;
  }
  require(expected.problems == 0, "an environment with a bad VRAMSPILL_* variable is refused");
  check_config_usable(result.config());
  require(result.config().device.budget == expected.budget &&
              result.config().device.reserve_bytes == expected.reserve,
          "the environment's device.budget and device.reserve are what the config holds");
  return 0;
}
