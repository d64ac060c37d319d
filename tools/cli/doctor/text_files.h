// Small procfs and sysfs files, read whole, for `vramspill doctor`.
#pragma once

#include <optional>
#include <string>

namespace vramspill::cli::doctor {

// The file's text; nullopt when it cannot be read.
std::optional<std::string> read_text_file(const std::string& path);

// The file's text as a whole number, surrounding whitespace allowed ("60\n", "-1\n"); nullopt when
// unreadable or anything else.
std::optional<long long> read_integer_file(const std::string& path);

}  // namespace vramspill::cli::doctor
