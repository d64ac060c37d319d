// `-o FILE`, the output of the commands that turn a trace into a file (export, report): the
// option and its help, and the writing, the same for each.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace vramspill::cli {

// Adds the required `-o,--output FILE` to `command`, bound to `output`; `what` is what the
// file is ("The file", "The page").
void add_output_option(CLI::App& command, std::string& output, std::string_view what);

// Whether `output` is standard output (`-o -`), where no summary of what was written goes.
bool is_standard_output(const std::string& output);

// Writes what `write` produces to `output` (Note [Where -o writes] in atomic_file.h; `-`:
// standard output). True, or false after saying why on standard error after `program`.
bool write_output(std::string_view program, const std::string& output,
                  const std::function<void(std::ostream&)>& write);

}  // namespace vramspill::cli
