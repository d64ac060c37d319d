// Keeps this process's figures in its stats file (telemetry/stats_file.h) for `vramspill stat`.
//
// Note [Publishing stats off the hot path]
// The figures live in the ledger, the host budget and the host pool; copying them into the stats
// file on every allocation would put a dozen stores and a clock read on the hot path of every
// hook. Instead one background thread publishes them twice a second, and once more at exit. The
// thread starts with the shim's initialisation (the first driver call or lookup, never at load:
// a process that never touches CUDA has no such thread), blocks every signal (the program's
// handlers must run on the program's threads), and is never joined: exit_group ends it, and
// publishing into a file already removed is harmless. A forked child has no such thread, and the
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
