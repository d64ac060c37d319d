// `promtool check metrics`, Prometheus's own parser and linter, on a text: for the tests of what
// `vramspill exporter` serves. PROMTOOL is where the build found it, empty when it did not (the
// tests that need it skip; tools/install-deps.sh --tests installs it).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "subprocess.h"

namespace vramspill::testing {

inline bool have_promtool() { return !std::string_view(PROMTOOL).empty(); }

// Its exit status and what it said (nothing when the text is valid and lint-free); `scratch` is
// a file it may write the text to.
inline RunResult promtool_check_metrics(const std::string& text,
                                        const std::filesystem::path& scratch) {
  std::ofstream(scratch, std::ios::binary) << text;
  return run_program(
      {"/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", PROMTOOL, scratch.string()}, {}, 60);
}

}  // namespace vramspill::testing
