// load_config(): defaults, then the TOML file, then the environment, each checked against the
// options table. Every problem is collected (a user fixing a config sees all of them at once)
// and reported with where it is, the key, what was expected and the valid names.
#include <fcntl.h>
#include <toml++/toml.h>
#include <unistd.h>  // environ, read, close

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/options.h"
#include "config/tiered_rules_reader.h"
#include "config/toml_prescan.h"
#include "config/toml_text.h"

namespace vramspill {
namespace {

using config_text::describe;
using config_text::did_you_mean;
using config_text::join;
using config_text::printable;
using config_text::quoted;

// One option's current value and where it came from, for messages about combinations.
struct Assigned {
  OptionValue value;
  std::string text;    // as the user wrote it
  std::string origin;  // "at job.toml:2:10", "in VRAMSPILL_DEVICE_BUDGET", "by default"
};

// Note [The policy's size limit]
// A policy sets about fifteen keys: a complete one with comments is a few KiB. The shim reads it
// in every process of the job that starts CUDA, so a path that names something else by mistake
// (a log, a data set, /proc/kcore) must not be read whole into each of them. 1 MiB is far more
// than any policy and little enough to read anywhere; a bigger file is refused.
constexpr std::size_t kMaxPolicyBytes = std::size_t{1} << 20;

// Reads a whole policy file: a regular file (Note [Only regular files] in config/config.h) of at
// most kMaxPolicyBytes. On failure returns nullopt and sets `problem`.
std::optional<std::string> read_file(const std::string& path, std::string& problem) {
  const int fd = open_regular_file(path, O_RDONLY, 0, problem);
  if (fd < 0) return std::nullopt;
  // Read one byte more than the limit: the size fstat() gives may change (or, in /proc, be 0).
  std::string text;
  char buffer[4096];
  int error = 0;
  while (text.size() <= kMaxPolicyBytes) {
    const ssize_t got = read(fd, buffer, sizeof buffer);
    if (got > 0) {
      text.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0) {
      break;
    } else if (errno != EINTR) {
      error = errno;
      break;
    }
  }
  close(fd);
  if (error != 0) {
    problem = std::strerror(error);
    return std::nullopt;
  }
  if (text.size() > kMaxPolicyBytes) {  // Note [The policy's size limit]
    problem = "it is larger than 1 MiB, too large for a policy (a policy is a few KiB)";
    return std::nullopt;
  }
  return text;
}

class Loader {
 public:
  Loader() : values_(options().size()) {}

  ConfigResult run(const char* const* environment) {
    for (std::size_t i = 0; i < options().size(); ++i) {
      const OptionSpec& option = options()[i];
      assign(i, std::string(option.default_text), "by default");
    }
    std::vector<std::pair<std::size_t, std::string>> from_environment;
    std::string file;
    read_environment(environment, file, from_environment);
    if (!file.empty()) read_toml(file);
    // The environment is applied last because it beats the file; it was read first so that a
    // bad variable is reported even when the file is bad too.
    for (const auto& [index, value] : from_environment)
      assign(index, value, "in " + env_name(options()[index]));
    check_reserve_below_budget();

    if (!errors_.empty()) return ConfigError{join(errors_, "\n"), errors_};
    Config config;
    for (std::size_t i = 0; i < options().size(); ++i)
      if (values_[i]) options()[i].store(config, values_[i]->value);
    config.tiered.rules = std::move(rules_);
    config.source_file = file;
    return config;
  }

 private:
  // Parses `text` as option `index`'s value; on success it replaces the current one.
  void assign(std::size_t index, const std::string& text, const std::string& origin) {
    const OptionSpec& option = options()[index];
    ParsedOption parsed = parse_option_text(option, text);
    if (!parsed.ok()) {
      errors_.push_back("bad value " + quoted(text) + " for " + option_name(option) + " " + origin +
                        ": " + parsed.problem + "; expected " + expected_text(option));
      return;
    }
    values_[index] = Assigned{std::move(*parsed.value), text, origin};
  }

  void read_environment(const char* const* environment, std::string& file,
                        std::vector<std::pair<std::size_t, std::string>>& found) {
    std::vector<std::string> seen;
    for (const char* const* entry = environment; entry != nullptr && *entry != nullptr; ++entry) {
      const std::string_view text(*entry);
      const std::size_t equals = text.find('=');
      const std::string_view name = text.substr(0, equals);
      if (!name.starts_with("VRAMSPILL_") || equals == std::string_view::npos) continue;
      // getenv() answers with the first of duplicate entries; so does this.
      if (std::ranges::find(seen, name) != seen.end()) continue;
      seen.emplace_back(name);
      const std::string value(text.substr(equals + 1));
      if (name == kConfigFileVariable) {
        file = value;
        continue;
      }
      if (name == kLibraryVariable) continue;
      const std::optional<std::size_t> index = option_for_variable(name);
      if (index) {
        found.emplace_back(*index, value);
        continue;
      }
      std::vector<std::string> known{std::string(kConfigFileVariable),
                                     std::string(kLibraryVariable)};
      for (const OptionSpec& option : options()) known.push_back(env_name(option));
      errors_.push_back("unknown environment variable " + printable(name) +
                        "; known: " + join(known, ", ") + did_you_mean(name, known, "", ""));
    }
  }

  static std::optional<std::size_t> option_for_variable(std::string_view name) {
    for (std::size_t i = 0; i < options().size(); ++i)
      if (env_name(options()[i]) == name) return i;
    return std::nullopt;
  }

  void read_toml(const std::string& file) {
    std::string problem;
    const std::optional<std::string> text = read_file(file, problem);
    if (!text) {
      errors_.push_back("cannot read the config file " + quoted(file) + " (" +
                        std::string(kConfigFileVariable) + "): " + problem);
      return;
    }
    file_ = file;
    // Note [Characters toml++ 3.3.0 mishandles] in config/toml_prescan.h
    if (const std::optional<MishandledCharacter> found = first_character_toml_mishandles(*text)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "%04X", static_cast<unsigned>(found->code_point));
      errors_.push_back("character U+" + std::string(hex) + " at " + printable(file_) + ":" +
                        std::to_string(found->line) + ":" + std::to_string(found->column) +
                        " is refused: the TOML library vramspill is built with (toml++ 3.3.0) "
                        "misreads it; keys are ASCII in TOML, and in a \"double-quoted\" string "
                        "write it as \\u" + std::string(hex));
      return;
    }
    toml::parse_result parsed = toml::parse(*text, file);
    if (!parsed) {
      const toml::parse_error& error = parsed.error();
      errors_.push_back("TOML syntax error at " + where(error.source()) + ": " +
                        printable(error.description()) + syntax_hint(error));
      return;
    }
    for (const auto& [key, node] : parsed.table()) read_top_level(key, node);
  }

  // toml++ reports an unquoted size (budget = 20GiB) as a malformed number; say what to write.
  static std::string syntax_hint(const toml::parse_error& error) {
    const std::string_view description = error.description();
    const bool in_a_number = description.find("integer") != std::string_view::npos ||
                             description.find("floating-point") != std::string_view::npos;
    if (!in_a_number) return "";
    return " (sizes and percents are strings in TOML: budget = \"20GiB\" or \"90%\")";
  }

  std::string where(const toml::source_region& region) const {
    return config_text::where(file_, region);
  }

  void read_top_level(const toml::key& key, const toml::node& node) {
    const std::string_view name = key.str();
    const auto sections = option_sections();
    std::vector<std::string> known(sections.begin(), sections.end());
    const bool is_section = std::ranges::find(sections, name) != sections.end();
    if (is_section && node.is_table()) {
      for (const auto& [inner_key, inner_node] : *node.as_table())
        read_key(name, inner_key, inner_node);
      return;
    }
    if (is_section) {
      errors_.push_back(quoted(name) + " at " + where(key.source()) + " must be a section ([" +
                        std::string(name) + "]), not " + std::string(describe(node.type())));
      return;
    }
    for (const OptionSpec& option : options()) {
      if (option.key == name && !node.is_table()) {
        errors_.push_back("key " + quoted(name) + " at " + where(key.source()) +
                          " is outside any section; it belongs in [" + std::string(option.section) +
                          "]");
        return;
      }
    }
    errors_.push_back("unknown section [" + printable(name) + "] at " + where(key.source()) +
                      "; known sections: " + join(known, ", ") +
                      did_you_mean(name, known, "[", "]"));
  }

  void read_key(std::string_view section, const toml::key& key, const toml::node& node) {
    const std::string_view name = key.str();
    if (section == "tiered" && name == kTieredRuleKey) {
      std::vector<TieredRule> read = read_tiered_rules(node, file_, errors_);
      rules_.insert(rules_.end(), std::make_move_iterator(read.begin()),
                    std::make_move_iterator(read.end()));
      return;
    }
    const OptionSpec* option = find_option(section, name);
    if (option == nullptr) {
      std::vector<std::string> known;
      for (const OptionSpec& candidate : options())
        if (candidate.section == section) known.emplace_back(candidate.key);
      if (section == "tiered") known.emplace_back(kTieredRuleKey);
      errors_.push_back("unknown key " + quoted(name) + " in [" + std::string(section) + "] at " +
                        where(key.source()) + "; known keys: " + join(known, ", ") +
                        did_you_mean(name, known, "'", "'"));
      return;
    }
    const std::size_t index = static_cast<std::size_t>(option - options().data());
    const std::string origin = "at " + where(node.source());
    if (const auto* text = node.as_string(); text != nullptr && accepts_text(option->type)) {
      assign(index, text->get(), origin);
      return;
    }
    if (const auto* integer = node.as_integer();
        integer != nullptr && accepts_integer(option->type)) {
      store_integer(index, integer->get(), origin);
      return;
    }
    if (const auto* boolean = node.as_boolean();
        boolean != nullptr && option->type == OptionType::kBool) {
      values_[index] = Assigned{boolean->get(), boolean->get() ? "true" : "false", origin};
      return;
    }
    errors_.push_back("wrong type for " + option_name(*option) + " " + origin + ": got " +
                      std::string(describe(node.type())) + ", expected " + expected_text(*option));
  }

  static bool accepts_text(OptionType type) {
    return type != OptionType::kBool && type != OptionType::kInteger;
  }

  static bool accepts_integer(OptionType type) {
    return type == OptionType::kSize || type == OptionType::kSizeOrPercent ||
           type == OptionType::kHostSizeOrPercent || type == OptionType::kInteger;
  }

  // A TOML integer: a byte count for sizes (so the same rules apply as to "123"), or the value.
  void store_integer(std::size_t index, int64_t value, const std::string& origin) {
    const OptionSpec& option = options()[index];
    if (option.type == OptionType::kInteger) {
      values_[index] = Assigned{value, std::to_string(value), origin};
      return;
    }
    if (value < 0) {
      errors_.push_back("bad value " + std::to_string(value) + " for " + option_name(option) + " " +
                        origin + ": negative; expected " + expected_text(option));
      return;
    }
    assign(index, std::to_string(value), origin);
  }

  // With both in bytes, a reserve that swallows the budget is surely a mistake (the limit would
  // be zero). With a percent budget the device total decides; the ledger checks that at start.
  void check_reserve_below_budget() {
    const OptionSpec* budget_at = find_option("device", "budget");
    const OptionSpec* reserve_at = find_option("device", "reserve");
    if (budget_at == nullptr || reserve_at == nullptr) return;
    const auto& budget = values_[static_cast<std::size_t>(budget_at - options().data())];
    const auto& reserve = values_[static_cast<std::size_t>(reserve_at - options().data())];
    if (!budget || !reserve) return;
    const auto& limit = std::get<Budget>(budget->value);
    const uint64_t reserve_bytes = std::get<uint64_t>(reserve->value);
    if (limit.is_fraction() || reserve_bytes < limit.byte_count()) return;
    errors_.push_back("device.reserve = " + printable(reserve->text) + " " + reserve->origin +
                      " is not less than device.budget = " + printable(budget->text) + " " +
                      budget->origin + ": nothing would be left to allocate");
  }

  std::vector<std::optional<Assigned>> values_;
  std::vector<TieredRule> rules_;  // [[tiered.rule]]: the file's only (tiered_rules_reader.h)
  std::vector<std::string> errors_;
  std::string file_;
};

ConfigResult internal_error(const char* what) noexcept {
  try {
    std::string message = std::string("internal error while reading the configuration: ") + what;
    return ConfigError{message, {message}};
  } catch (...) {
    return ConfigError{"out of memory", {}};  // short enough to need no allocation
  }
}

}  // namespace

ConfigResult load_config(const char* const* environment) noexcept {
  // No exception may escape into the hook that called this (an allocation failure while reading
  // the config, a table bug): it becomes a config error, which the shim logs and survives.
  try {
    return Loader().run(environment);
  } catch (const std::exception& e) {
    return internal_error(e.what());
  } catch (...) {
    return internal_error("unknown exception");
  }
}

ConfigResult load_config() noexcept { return load_config(environ); }

}  // namespace vramspill
