// SIGINT and SIGTERM that would end the job at once: the exit summary, the stats file and the
// trace's end still happen (Note [A signal that ends the job]).
//
// Note [A signal that ends the job]
// A process that SIGINT or SIGTERM ends by default runs no atexit handler: it left no exit
// summary, its stats file stayed behind until the next `vramspill stat` removed it, and its trace
// had no end. So when the shim starts, it takes each of the two whose disposition is still the
// default, with a thread that waits for it:
// - The handler only checks that this is the process the thread runs in (a forked child has no
//   such thread) and that no signal is being handled already, then wakes the thread (Note [Waking
//   the shim's thread]), all async-signal-safe, and returns: the program runs on for the moment
//   the thread needs.
// - The thread writes what exit would (write_last_words in hooks/shim_state.h: the stats file
//   removed, the trace ended, the summary), puts the default disposition back and sends the
//   signal again: the process ends by it, with the status it would have had. Last words that
//   cannot be written (a standard error nobody drains, a lock a hung thread holds) hold the job
//   for two seconds at most: another thread ends it by the signal then. An orchestrator sends
//   one SIGTERM and a SIGKILL after its grace period: the job must not outlive the first.
// - Anything else ends the process by the signal's default at once: a second signal while the
//   thread works (a user pressing Ctrl-C twice), a forked child, a wake-up that cannot be sent.
// As the first process of a PID namespace (a container's command run directly), the process
// never gets a signal of default disposition: the kernel drops it. The shim takes none there, or
// a SIGTERM would end the trace and the stats and then be dropped again, leaving the job running
// without them.
// A disposition the program set before the shim started (Python's SIGINT handler, a signal it
// ignores) is left alone: its handler decides what the signal does, and an exit it makes runs
// atexit as usual. A handler the program sets later replaces the shim's, the same way.
//
// Note [A handler the program chains to ours]
// A handler the program installs later may call the one it replaced, which is the shim's (Rust's
// signal-hook, and handlers that save the old action and call it, do). The shim's thread then
// finds, when woken, that its handler no longer runs for that signal: the program handles it (a
// graceful shutdown, say), so the thread neither writes the last words nor ends the process; it
// forgets the signal and waits again. The program's own exit writes the last words as usual.
//
// Note [Waking the shim's thread]
// Through a connected pair of Unix sockets of the shim's own (Note [The shim's own descriptors]):
// the handler sends one byte on one end (MSG_NOSIGNAL: never a SIGPIPE; MSG_DONTWAIT: never a
// wait in a handler) after checking, by device and inode, that its descriptor is still the socket
// (a program may close descriptors it does not own and reuse the number); the thread reads the
// other. Not an eventfd: every eventfd shares one inode, so a program's own eventfd that took the
// number would pass the check and take the wake-up, and the thread would never wake.
#pragma once

#include "hooks/shim_state.h"

namespace vramspill::hooks {

// Once, at start-up: takes SIGINT and SIGTERM where their disposition is the default, if the
// thread and the socket pair can be made; otherwise leaves everything as it was, and says so.
void catch_ending_signals(ShimState& shim) noexcept;

}  // namespace vramspill::hooks
