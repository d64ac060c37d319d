#include "doctor/text_files.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace vramspill::cli::doctor {

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return std::nullopt;
  return text.str();
}

std::optional<long long> read_integer_file(const std::string& path) {
  const std::optional<std::string> text = read_text_file(path);
  if (!text) return std::nullopt;
  const std::size_t first = text->find_first_not_of(" \t\n");
  const std::size_t last = text->find_last_not_of(" \t\n");
  if (first == std::string::npos) return std::nullopt;
  long long value = 0;
  const char* end = text->data() + last + 1;
  const auto [stop, error] = std::from_chars(text->data() + first, end, value);
  if (error != std::errc() || stop != end) return std::nullopt;
  return value;
}

}  // namespace vramspill::cli::doctor
