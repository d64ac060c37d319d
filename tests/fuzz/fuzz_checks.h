// What the fuzzers in this folder share: failing so that libFuzzer keeps the input, and the
// checks every configuration error must pass whatever the input was.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace vramspill::fuzz {

// Prints which property broke and aborts: libFuzzer reports the abort as a crash and writes the
// input to crash-<sha1> (its -artifact_prefix), which then becomes a regression seed.
[[noreturn]] inline void fail(std::string_view property, std::string_view detail = "") {
  std::fprintf(stderr, "\nproperty violated: %.*s\n%.*s\n", static_cast<int>(property.size()),
               property.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

inline void require(bool holds, std::string_view property, std::string_view detail = "") {
  if (!holds) fail(property, detail);
}

// load_config() with `environment` as its NAME=VALUE entries.
inline ConfigResult load_with(const std::vector<std::string>& environment) {
  std::vector<const char*> entries;
  entries.reserve(environment.size() + 1);
  for (const std::string& entry : environment) entries.push_back(entry.c_str());
  entries.push_back(nullptr);
  return load_config(entries.data());
}

// What config.h promises of every ConfigError: at least one problem, `message` is the problems
// one per line, and each problem is a single printable line (control characters escaped, so a
// hostile value cannot forge log lines). load_config() turns an exception into "internal error
// ...", which names no place and is a bug whatever the input.
inline void check_error_lines(const ConfigError& error) {
  require(!error.problems.empty(), "an error has at least one problem", error.message);
  std::string joined;
  for (const std::string& problem : error.problems) {
    if (!joined.empty()) joined += '\n';
    joined += problem;
    require(!problem.empty(), "a problem is not empty", error.message);
    for (const char c : problem) {
      const auto byte = static_cast<unsigned char>(c);
      require(byte >= 0x20 && byte != 0x7f, "a problem is one printable line", problem);
    }
    require(!problem.starts_with("internal error"), "no exception inside load_config()", problem);
  }
  require(joined == error.message, "the message is the problems, one per line", error.message);
}

// What a loaded Config promises the shim, whatever the text it came from.
inline void check_config_usable(const Config& config) {
  const auto usable_budget = [](const Budget& budget) {
    return budget.is_fraction() ? budget.fraction_of_total() > 0 && budget.fraction_of_total() <= 1
                                : budget.byte_count() > 0;
  };
  require(usable_budget(config.device.budget), "device.budget is above 0 (and at most 100%)");
  require(usable_budget(config.spill.host_limit), "spill.host_limit is above 0 (and at most 100%)");
  require(config.device.budget.is_fraction() ||
              config.device.reserve_bytes < config.device.budget.byte_count(),
          "device.reserve is below a size device.budget");
  require(
      static_cast<std::size_t>(config.spill.mode) < kSpillModeNames.size() &&
          static_cast<std::size_t>(config.spill.managed_location) < kManagedLocationNames.size() &&
          static_cast<std::size_t>(config.report.memory_info) < kMemoryInfoNames.size() &&
          static_cast<std::size_t>(config.log.level) < kLogLevelNames.size(),
      "every enum holds one of its names");
  require(config.log.file.find('\0') == std::string::npos, "log.file holds no NUL");
}

}  // namespace vramspill::fuzz
