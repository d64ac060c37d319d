#include "config/toml_text.h"

#include <optional>

#include "config/suggest.h"

namespace vramspill::config_text {

std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[byte >> 4];
    out += kHex[byte & 0xf];
  }
  return out;
}

std::string quoted(std::string_view text) {
  // Appended rather than "'" + printable(text): GCC 12 at -O3 warns falsely (-Wrestrict) there.
  std::string out = "'";
  out += printable(text);
  out += '\'';
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         std::string_view before, std::string_view after) {
  const std::optional<std::string> match = closest_match(word, candidates);
  if (!match) return "";
  return " (did you mean " + std::string(before) + *match + std::string(after) + "?)";
}

std::string_view describe(toml::node_type type) {
  switch (type) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string where(std::string_view file, const toml::source_region& region) {
  return printable(file) + ":" + std::to_string(region.begin.line) + ":" +
         std::to_string(region.begin.column);
}

}  // namespace vramspill::config_text
