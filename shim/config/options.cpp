#include "config/options.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "util/sizes.h"

namespace vramspill {
namespace {

// Note [One options table]
// Each row says everything about one option; `store` is the only code that knows which Config
// field it fills. The table is constexpr so that it is built at compile time: the shim does no
// work when it is loaded (DESIGN.md section 4), and reading the table needs no initialisation.
// Defaults are text parsed by the same code as environment values, so a default can never be
// something a user could not have written (a test parses every one).
// One row per option reads better than the one field per line clang-format would make of it.
// clang-format off
constexpr std::array<OptionSpec, 6> kOptions = {{
    {"device", "budget", OptionType::kSizeOrPercent, "100%",
     "Device memory the job may use: a size, or a percent of the GPU's total memory.",
     {},
     [](Config& c, const OptionValue& v) { c.device.budget = std::get<Budget>(v); }},
    {"device", "reserve", OptionType::kSize, "0",
     "Headroom kept free below the budget (for the CUDA context, library workspaces, other "
     "processes): the limit enforced is budget minus reserve.",
     {},
     [](Config& c, const OptionValue& v) { c.device.reserve_bytes = std::get<uint64_t>(v); }},
    {"spill", "mode", OptionType::kEnum, "off",
     "What happens to an allocation over the limit. `off`: it fails with "
     "`CUDA_ERROR_OUT_OF_MEMORY`, as without vramspill (spilling to host memory comes later).",
     kSpillModeNames,
     [](Config& c, const OptionValue& v) {
       c.spill.mode = static_cast<SpillMode>(std::get<Choice>(v).index);
     }},
    {"log", "level", OptionType::kEnum, "info",
     "Least severe message that is logged; `off` logs nothing.",
     kLogLevelNames,
     [](Config& c, const OptionValue& v) {
       c.log.level = static_cast<LogLevel>(std::get<Choice>(v).index);
     }},
    {"log", "file", OptionType::kPath, "",
     "File the log is appended to; empty: standard error.",
     {},
     [](Config& c, const OptionValue& v) { c.log.file = std::get<std::string>(v); }},
    {"log", "summary", OptionType::kBool, "true",
     "Log one summary line when the program exits (unless the level is `off`).",
     {},
     [](Config& c, const OptionValue& v) { c.log.summary = std::get<bool>(v); }},
}};
// clang-format on

constexpr std::array<std::string_view, 3> kSections = {"device", "spill", "log"};

// ASCII only, on purpose: <cctype> follows the program's locale, and in a Turkish one 'i' does
// not upper-case to 'I'.
char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string upper(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(), ascii_upper);
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(), ascii_lower);
  return out;
}

std::string join(std::span<const std::string_view> items, std::string_view separator,
                 std::string_view quote = "") {
  std::string out;
  for (std::string_view item : items) {
    if (!out.empty()) out += separator;
    out.append(quote).append(item).append(quote);
  }
  return out;
}

ParsedOption failure(std::string problem) { return {std::nullopt, std::move(problem)}; }
ParsedOption success(OptionValue value) { return {std::move(value), {}}; }

ParsedOption parse_size_or_percent(std::string_view text) {
  if (text.find('%') != std::string_view::npos) {
    const std::optional<double> fraction = parse_percent(text);
    if (!fraction) return failure("not a percent");
    if (*fraction <= 0 || *fraction > 1)
      return failure("a percent must be above 0 and at most 100");
    return success(Budget::fraction(*fraction));
  }
  const std::optional<uint64_t> bytes = parse_size(text);
  if (!bytes) return failure("not a size");
  if (*bytes == 0) return failure("a budget of 0 bytes allows nothing");
  return success(Budget::bytes(*bytes));
}

ParsedOption parse_bool(std::string_view text) {
  static constexpr std::array<std::string_view, 4> kTrue = {"true", "1", "yes", "on"};
  static constexpr std::array<std::string_view, 4> kFalse = {"false", "0", "no", "off"};
  const std::string word = lower(text);
  if (std::ranges::find(kTrue, word) != kTrue.end()) return success(true);
  if (std::ranges::find(kFalse, word) != kFalse.end()) return success(false);
  return failure("not a boolean");
}

ParsedOption parse_integer(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size())
    return failure("not an integer");
  return success(value);
}

}  // namespace

std::span<const OptionSpec> options() { return kOptions; }

std::span<const std::string_view> option_sections() { return kSections; }

const OptionSpec* find_option(std::string_view section, std::string_view key) {
  for (const OptionSpec& option : kOptions)
    if (option.section == section && option.key == key) return &option;
  return nullptr;
}

std::string option_name(const OptionSpec& option) {
  return std::string(option.section) + "." + std::string(option.key);
}

std::string env_name(const OptionSpec& option) {
  return "VRAMSPILL_" + upper(option.section) + "_" + upper(option.key);
}

std::string expected_text(const OptionSpec& option) {
  switch (option.type) {
    case OptionType::kSize:
      return "a size in bytes, optionally with a unit: 123, 512MiB, 20GiB, 1.5GB";
    case OptionType::kSizeOrPercent:
      return "a size (123, 512MiB, 20GiB, 1.5GB) or a percent of the device's memory (90%)";
    case OptionType::kEnum:
      return "one of: " + join(option.choices, ", ");
    case OptionType::kBool:
      return "true or false";
    case OptionType::kPath:
      return "a file path";
    case OptionType::kInteger:
      return "an integer";
  }
  return "?";
}

ParsedOption parse_option_text(const OptionSpec& option, std::string_view text) {
  switch (option.type) {
    case OptionType::kSize: {
      const std::optional<uint64_t> bytes = parse_size(text);
      if (!bytes) return failure("not a size");
      return success(*bytes);
    }
    case OptionType::kSizeOrPercent:
      return parse_size_or_percent(text);
    case OptionType::kEnum: {
      const auto at = std::ranges::find(option.choices, text);
      if (at == option.choices.end()) return failure("not a valid choice");
      return success(Choice{static_cast<std::size_t>(at - option.choices.begin())});
    }
    case OptionType::kBool:
      return parse_bool(text);
    case OptionType::kPath:
      if (text.find('\0') != std::string_view::npos) return failure("a path cannot contain NUL");
      return success(std::string(text));
    case OptionType::kInteger:
      return parse_integer(text);
  }
  return failure("unknown option type");
}

std::string options_markdown_table() {
  std::string out =
      "| Key | Environment variable | Type | Default | Meaning |\n"
      "|---|---|---|---|---|\n";
  for (const OptionSpec& option : kOptions) {
    std::string type;
    switch (option.type) {
      case OptionType::kSize:
        type = "size";
        break;
      case OptionType::kSizeOrPercent:
        type = "size or percent";
        break;
      case OptionType::kEnum:
        type = "one of " + join(option.choices, ", ", "`");
        break;
      case OptionType::kBool:
        type = "bool";
        break;
      case OptionType::kPath:
        type = "path";
        break;
      case OptionType::kInteger:
        type = "integer";
        break;
    }
    const std::string default_cell =
        option.default_text.empty() ? "empty" : "`" + std::string(option.default_text) + "`";
    out += "| `" + option_name(option) + "` | `" + env_name(option) + "` | " + type + " | " +
           default_cell + " | " + std::string(option.doc) + " |\n";
  }
  return out;
}

}  // namespace vramspill
