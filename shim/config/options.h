// The options table: the single source of every configuration option. The TOML schema, the
// VRAMSPILL_<SECTION>_<KEY> environment names, the defaults, the README's table and the typed
// Config all come from it (Note [One options table]). Adding an option is one row in options.cpp
// plus its Config field; tests fail on a row without documentation or with a bad default, and
// when the README's table is stale.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "config/config.h"

namespace vramspill {

enum class OptionType {
  kSize,           // bytes: 123, 512MiB, 20GiB, 1.5GB (TOML: an integer or a string)
  kSizeOrPercent,  // a size, or a percent of the device's memory: 90% (TOML: as kSize)
  kHostSizeOrPercent,  // a size, or a percent of the host's available memory (TOML: as kSize)
  kEnum,           // one of OptionSpec::choices (TOML: a string)
  kBool,           // TOML: true/false; environment: true/false, 1/0, yes/no, on/off
  kPath,           // a file path; may be empty (TOML: a string)
  kInteger,        // a signed 64-bit integer (TOML: an integer)
};

// An enum option's value: the index of the choice in OptionSpec::choices (and so the value of
// the typed enum whose names array the choices are).
struct Choice {
  std::size_t index = 0;
};

// A value checked against its option's type, before it is stored in a Config.
using OptionValue = std::variant<uint64_t, Budget, Choice, bool, std::string, int64_t>;

struct OptionSpec {
  std::string_view section;
  std::string_view key;
  OptionType type;
  std::string_view default_text;              // parsed like an environment value
  std::string_view doc;                       // one line, Markdown, for the README
  std::span<const std::string_view> choices;  // kEnum only
  void (*store)(Config& config, const OptionValue& value);
};

std::span<const OptionSpec> options();

// The sections in table order, each once.
std::span<const std::string_view> option_sections();

const OptionSpec* find_option(std::string_view section, std::string_view key);

std::string option_name(const OptionSpec& option);  // "device.budget"
std::string env_name(const OptionSpec& option);     // "VRAMSPILL_DEVICE_BUDGET"

// The variable naming the TOML file.
inline constexpr std::string_view kConfigFileVariable = "VRAMSPILL_CONFIG";
// Where `vramspill run` finds libvramspill.so; not the shim's business, but a user may export
// it, so the shim must not call it unknown.
inline constexpr std::string_view kLibraryVariable = "VRAMSPILL_LIBRARY";

// What a value of this option must look like, for error messages: "a size such as 20GiB ...".
std::string expected_text(const OptionSpec& option);

// A value, or (when `value` is empty) the reason it is not one ("not a size"); the caller adds
// where the text came from.
struct ParsedOption {
  std::optional<OptionValue> value;
  std::string problem;
  bool ok() const { return value.has_value(); }
};

// Parses a textual value: an environment variable, a default, or a TOML string. For kBool and
// kInteger text is accepted only from the environment and from defaults; the TOML reader checks
// the node's type before it gets here.
ParsedOption parse_option_text(const OptionSpec& option, std::string_view text);

// The README's "Configuration" table (Markdown, one row per option, ending in a newline).
std::string options_markdown_table();

}  // namespace vramspill
