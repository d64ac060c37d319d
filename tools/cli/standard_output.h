// Note [Standard output that cannot be written]
// What vramspill prints on standard output is what a script reads (doctor --json, stat --once,
// exporter --once, replay's table, export's and report's summaries, `-o -`). When standard
// output cannot take it (a full disk, a file system gone, >/dev/full) the write fails only
// inside the stream's buffer, unseen unless someone looks: the command would exit 0 with its
// output lost. So each command, once its output is written, flushes it and looks, and fails
// with exit status 1 and one line on standard error. std::cout writes through stdio's stdout
// (the streams are synchronised with stdio), so one look covers what printf wrote too.
#pragma once

#include <string_view>

namespace vramspill::cli {

// A command's exit status when its output could not be written.
inline constexpr int kCannotWrite = 1;

// Flushes standard output; false, after "PROGRAM: cannot write standard output: REASON" on
// standard error, when anything written to it did not get there.
bool flush_standard_output(std::string_view program);

// `status` once standard output has taken everything written to it, else kCannotWrite (after
// saying why): how a command that printed its output ends.
int exit_status_after_output(std::string_view program, int status);

}  // namespace vramspill::cli
