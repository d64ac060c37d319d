#include "prometheus_label.h"

#include <cstddef>

namespace vramspill::cli {
namespace {

// The length of the well-formed UTF-8 sequence `text` starts with (Unicode's table 3-7: no
// overlong forms, surrogates or code points past U+10FFFF), or 0 when it starts with none.
std::size_t utf8_sequence_length(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;  // the bounds of the second byte
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  return length;
}

}  // namespace

std::string prometheus_label_value(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    const std::size_t length = utf8_sequence_length(text);
    if (length == 0) {  // Note [Prometheus label values]
      out += "\xEF\xBF\xBD";
      text.remove_prefix(1);
      continue;
    }
    if (text[0] == '\\')
      out += R"(\\)";
    else if (text[0] == '"')
      out += R"(\")";
    else if (text[0] == '\n')
      out += R"(\n)";
    else
      out.append(text.substr(0, length));
    text.remove_prefix(length);
  }
  return out;
}

}  // namespace vramspill::cli
