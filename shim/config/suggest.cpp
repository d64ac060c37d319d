#include "config/suggest.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace vramspill {
namespace {

char fold(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Levenshtein distance with one row of memory; names here are a few dozen characters.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitute = diagonal + (fold(a[i - 1]) == fold(b[j - 1]) ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 3;  // more than two edits is not a typo
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance && distance * 2 < candidate.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace vramspill
