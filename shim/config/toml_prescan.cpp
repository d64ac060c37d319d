#include "config/toml_prescan.h"

namespace vramspill {
namespace {

bool mishandled(char32_t c) {
  return (c > 0xA0 && c <= 0x499) || (c >= 0x2C5E && c <= 0x3057 && c != 0x3000) ||
         (c >= 0xFB26 && c < 0xFEFF);
}

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

std::optional<MishandledCharacter> first_character_toml_mishandles(std::string_view text) {
  MishandledCharacter found;
  for (std::size_t at = 0; at < text.size(); ++at) {
    const auto lead = static_cast<unsigned char>(text[at]);
    if (lead == '\n') {
      ++found.line;
      found.column = 1;
      continue;
    }
    if (is_continuation(lead)) continue;  // counted with its lead byte
    // Every code point in the ranges takes two or three bytes in UTF-8; a malformed sequence
    // is toml++'s to report, and it does so without the whitespace question.
    const auto byte = [&](std::size_t offset) {
      return at + offset < text.size() ? static_cast<unsigned char>(text[at + offset]) : 0;
    };
    char32_t code_point = 0;
    if ((lead & 0xE0) == 0xC0 && is_continuation(byte(1))) {
      code_point = char32_t{(lead & 0x1Fu) << 6 | (byte(1) & 0x3Fu)};
    } else if ((lead & 0xF0) == 0xE0 && is_continuation(byte(1)) && is_continuation(byte(2))) {
      code_point = char32_t{(lead & 0x0Fu) << 12 | (byte(1) & 0x3Fu) << 6 | (byte(2) & 0x3Fu)};
    }
    if (mishandled(code_point)) {
      found.code_point = code_point;
      return found;
    }
    ++found.column;
  }
  return std::nullopt;
}

}  // namespace vramspill
