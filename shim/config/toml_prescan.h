// A look at a policy file before toml++ parses it.
//
// Note [Characters toml++ 3.3.0 mishandles]
// toml++ 3.3.0 (Debian 12's) asks whether a code point is whitespace in many places: between
// tokens, and when it scans a malformed token to report it. For most of U+00A1..U+0499,
// U+2C5E..U+3057 and U+FB26..U+FEFE that question reaches __builtin_unreachable()
// (marzer/tomlplusplus#190 and #295, fixed upstream by #305): undefined behaviour on a typo such
// as `budgét = 1`, or on `level = -"débug"`, where the string follows a malformed value. Whether
// a character is reached that way depends on toml++'s state, not on where it stands, so the shim
// refuses these characters anywhere in the file (strings and comments too), with their place,
// before toml++ sees the text. Other non-ASCII characters (CJK, emoji, U+3000) pass.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace vramspill {

struct MishandledCharacter {
  char32_t code_point = 0;
  std::size_t line = 1;    // from 1
  std::size_t column = 1;  // from 1, in code points, as toml++ counts
};

// The first character of `text` that toml++ 3.3.0 mishandles, if any.
std::optional<MishandledCharacter> first_character_toml_mishandles(std::string_view text);

}  // namespace vramspill
