// Writing an output file so that a failure leaves no half-written file, nor harms one that was
// there: the text goes to a new file beside it, which is renamed over it once complete.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace vramspill::cli {

// Calls `write` with a stream to a new file beside `path` (mode: what any new file gets), then
// renames it over `path`. Empty on success, else what went wrong; the new file is gone then.
std::string write_file_atomically(const std::string& path,
                                  const std::function<void(std::ostream&)>& write);

}  // namespace vramspill::cli
