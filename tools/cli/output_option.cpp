#include "output_option.h"

#include <iostream>

#include "atomic_file.h"
#include "standard_output.h"

namespace vramspill::cli {

void add_output_option(CLI::App& command, std::string& output, std::string_view what) {
  command
      .add_option("-o,--output", output,
                  std::string(what) +
                      " to write: replaced when it exists (keeping its permissions), written "
                      "through a symbolic link, written in place when a device or pipe; - for "
                      "standard output (and no summary line).")
      ->required()
      ->type_name("FILE");
}

bool is_standard_output(const std::string& output) { return output == "-"; }

bool write_output(std::string_view program, const std::string& output,
                  const std::function<void(std::ostream&)>& write) {
  if (is_standard_output(output)) {
    write(std::cout);
    return flush_standard_output(program);
  }
  const std::string problem = write_file_atomically(output, write);
  if (problem.empty()) return true;
  std::cerr << program << ": cannot write " << output << ": " << problem << "\n";
  return false;
}

}  // namespace vramspill::cli
