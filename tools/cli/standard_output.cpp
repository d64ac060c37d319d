#include "standard_output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace vramspill::cli {

bool flush_standard_output(std::string_view program) {
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  // A write that failed before this flush left its reason in errno: the commands print their
  // output last, so no later call has failed since.
  const int error = errno;
  if (flushed && std::ferror(stdout) == 0 && std::cout.good()) return true;
  std::cerr << program << ": cannot write standard output: "
            << std::strerror(error != 0 ? error : EIO) << "\n";
  return false;
}

int exit_status_after_output(std::string_view program, int status) {
  return flush_standard_output(program) ? status : kCannotWrite;
}

}  // namespace vramspill::cli
