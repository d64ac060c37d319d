// Writing an output file so that a failure leaves no half-written file, nor harms one that was
// there: the text goes to a new file beside it, which is renamed over it once complete.
//
// Note [Where -o writes]
// `-o PATH` writes what the user would have got from `> PATH`, without its half-written file:
// - a new file, or an existing regular file: written to a new file beside it, renamed over it
//   once complete (an existing file keeps its permission bits; a new one gets those any new
//   file gets, 0666 less the umask);
// - a symbolic link: followed, as `>` follows it, to the file it names (which is then written
//   as above, in that file's directory); the link itself stays;
// - anything else that exists (a device such as /dev/null, a FIFO, a socket): written in place,
//   opened without creating or renaming anything, as renaming a regular file over it would
//   replace the device node or pipe for every other user of it; /dev/stdout and /dev/fd/N
//   naming a pipe (links of /proc/self/fd to no path) are written so too.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace vramspill::cli {

// Calls `write` with a stream to `path`, as Note [Where -o writes] says. Empty on success, else
// what went wrong; a new file beside `path` is gone then.
std::string write_file_atomically(const std::string& path,
                                  const std::function<void(std::ostream&)>& write);

}  // namespace vramspill::cli
