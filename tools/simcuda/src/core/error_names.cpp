#include "core/error_names.h"

#include <charconv>

namespace simcuda {
namespace {

constexpr ErrorName kErrors[] = {
#include "error_names.inc"
};

}  // namespace

const ErrorName* find_error(CUresult result) {
  for (const ErrorName& error : kErrors)
    if (error.result == result) return &error;
  return nullptr;
}

std::optional<CUresult> parse_result(std::string_view text) {
  for (const ErrorName& error : kErrors)
    if (text == error.name) return error.result;
  int number = 0;
  const auto [end, problem] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (problem != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  const CUresult result = static_cast<CUresult>(number);
  if (find_error(result) == nullptr) return std::nullopt;
  return result;
}

}  // namespace simcuda
