#include "init_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>

namespace vramspill::cli {
namespace {

constexpr int kPassedOn[] = {SIGHUP,  SIGINT,   SIGQUIT, SIGTERM, SIGUSR1,
                             SIGUSR2, SIGWINCH, SIGCONT, SIGTSTP};

sigset_t served_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (const int signal : kPassedOn) sigaddset(&set, signal);
  sigaddset(&set, SIGCHLD);
  return set;
}

// The status a shell gives a process that ended with `status`.
int shell_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Reaps every child that has ended; the command's status once it is among them.
std::optional<int> reap(pid_t command) {
  std::optional<int> ended;
  int status = 0;
  for (pid_t child; (child = waitpid(-1, &status, WNOHANG)) > 0;) {
    if (child == command) ended = shell_status(status);
  }
  return ended;
}

}  // namespace

std::optional<int> run_as_init(char* const argv[], char* const envp[]) {
  const sigset_t served = served_signals();
  sigset_t before;
  if (sigprocmask(SIG_BLOCK, &served, &before) != 0) return std::nullopt;
  // The command starts with the mask this process had and every disposition at its default.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &before);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t command = 0;
  const int spawned = posix_spawnp(&command, argv[0], nullptr, &attributes, argv, envp);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    sigprocmask(SIG_SETMASK, &before, nullptr);
    errno = spawned;
    return std::nullopt;
  }
  for (;;) {
    siginfo_t received{};
    if (sigwaitinfo(&served, &received) < 0) continue;  // EINTR: a signal not served here
    if (received.si_signo != SIGCHLD) {
      kill(command, received.si_signo);
      continue;
    }
    if (const std::optional<int> status = reap(command)) return status;
  }
}

}  // namespace vramspill::cli
