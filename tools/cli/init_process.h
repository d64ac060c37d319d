// `vramspill run` as the first process of a PID namespace.
//
// Note [vramspill run as the first process]
// A container's command is the first process (PID 1) of its PID namespace, and the kernel never
// delivers to that process a signal whose disposition is the default: a job started as PID 1
// ignores `docker stop`'s SIGTERM and Ctrl-C, its runtime waits out the grace period and kills
// it, and the orphans it leaves stay zombies, since reaping them is PID 1's work. The container
// entrypoint (tools/container) ends in `vramspill run`, so when `run` finds itself PID 1 it does
// not replace itself with the command, as it does elsewhere: it starts the command as its child
// and stays as the namespace's init, as tini and dumb-init do. It passes each signal a job is
// sent to end or steer it (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH,
// SIGCONT, SIGTSTP) on to the child, reaps every process that ends, and exits with the child's
// status once the child ends: its exit code, or 128 and the number of the signal that ended it,
// as a shell reports it. The signals are kept blocked and taken with sigwaitinfo: a blocked
// signal is queued even for PID 1, whose default dispositions the kernel ignores. The child
// leads a process group of its own, the terminal's foreground one under `docker run -it`, so
// that Ctrl-C reaches it once, from the terminal, and not a second time through init.
#pragma once

#include <optional>

namespace vramspill::cli {

// Runs `argv` (searched for in PATH, as execvpe does) with the environment `envp` as this
// process's child and serves as init until it ends (Note [vramspill run as the first process]):
// its status, or nullopt with errno set when it could not be started.
std::optional<int> run_as_init(char* const argv[], char* const envp[]);

}  // namespace vramspill::cli
