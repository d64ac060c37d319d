// Keeps this process's figures in its stats file (telemetry/stats_file.h) for `vramspill stat`.
//
// Note [Publishing stats off the hot path]
// The figures live in the ledger, the host budget and the host pool; publishing them (a clock
// read, an fstat and a pwrite of the whole segment: Note [Stats segment consistency]) on every
// allocation would put system calls on the hot path of every hook. Instead one background thread
// publishes them twice a second, and once more at exit; the hooks make no call for stats. The
// thread starts with the shim's initialisation (the first driver call or lookup, never at load:
// a process that never touches CUDA has no such thread), blocks every signal (the program's
// handlers must run on the program's threads), and is never joined: exit_group ends it, and
// a publish after the file is removed does nothing. A forked child has no such thread, and the
// file's owner check makes the child's publishes no-ops.
#pragma once

#include "hooks/shim_state.h"

namespace vramspill::hooks {

// Creates the stats file and starts the publishing thread; with [log] stats = false, or when the
// file cannot be created (logged once), does nothing.
void start_stats_publisher(ShimState& shim) noexcept;

// Publishes the final figures and removes the file (at exit).
void stop_stats_publisher(ShimState& shim) noexcept;

}  // namespace vramspill::hooks
