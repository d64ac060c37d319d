// How the configuration's error messages spell what they quote: one printable line each, with
// the place (file:line:column) toml++ gives a node. Shared by the options reader
// (load_config.cpp) and the [[tiered.rule]] reader (tiered_rules_reader.cpp).
#pragma once

#include <toml++/toml.h>

#include <string>
#include <string_view>
#include <vector>

namespace vramspill::config_text {

// `text` with control characters escaped as \xNN: values, keys, variable names and paths may
// hold anything, and each message must stay one printable line.
std::string printable(std::string_view text);

// printable(text) in single quotes.
std::string quoted(std::string_view text);

std::string join(const std::vector<std::string>& items, std::string_view separator);

// " (did you mean <before>match<after>?)" for the candidate closest to `word`, or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         std::string_view before, std::string_view after);

// "a string", "an integer", ...: what a node is, for "got ..., expected ...".
std::string_view describe(toml::node_type type);

// "job.toml:3:10": where `region` begins in `file`.
std::string where(std::string_view file, const toml::source_region& region);

}  // namespace vramspill::config_text
