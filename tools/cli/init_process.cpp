#include "init_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

// In the child, before it becomes the command: a process group of its own, the terminal's
// foreground one when there is a terminal, so that what the terminal sends (Ctrl-C, Ctrl-Z)
// reaches the command once, and not also init, which would pass it on a second time. Only
// async-signal-safe calls: this runs between fork and exec.
void lead_own_group() {
  setpgid(0, 0);
  if (!isatty(STDIN_FILENO)) return;
  // A background group that sets the foreground is sent SIGTTOU, which would stop it.
  sigset_t ttou;
  sigset_t previous;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  sigprocmask(SIG_BLOCK, &ttou, &previous);
  tcsetpgrp(STDIN_FILENO, getpid());
  sigprocmask(SIG_SETMASK, &previous, nullptr);
}

// Starts the command as a child with the signal mask `mask`; its pid, or -1 with errno set to
// why it could not be executed (reported back through a pipe closed on exec).
pid_t start(char* const argv[], char* const envp[], const sigset_t& mask) {
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(report[0]);
    lead_own_group();
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    // execvpe, as `run` uses elsewhere: a script without #! runs through /bin/sh.
    execvpe(argv[0], argv, envp);
    const int error = errno;
    (void)!write(report[1], &error, sizeof error);
    _exit(127);
  }
  const int fork_error = errno;
  close(report[1]);
  if (child < 0) {
    close(report[0]);
    errno = fork_error;
    return -1;
  }
  int error = 0;
  ssize_t got = 0;
  while ((got = read(report[0], &error, sizeof error)) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (got == static_cast<ssize_t>(sizeof error)) {  // the exec failed
    waitpid(child, nullptr, 0);
    errno = error;
    return -1;
  }
  return child;
}

}  // namespace

std::optional<int> run_as_init(char* const argv[], char* const envp[]) {
  const sigset_t served = served_signals();
  sigset_t before;
  if (sigprocmask(SIG_BLOCK, &served, &before) != 0) return std::nullopt;
  const pid_t command = start(argv, envp, before);
  if (command < 0) {
    const int error = errno;
    sigprocmask(SIG_SETMASK, &before, nullptr);
    errno = error;
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
