#include "hooks/ending_signals.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "telemetry/log.h"
#include "telemetry/owned_descriptor.h"
#include "util/quiet_thread.h"

namespace vramspill::hooks {
namespace {

constexpr int kEndingSignals[] = {SIGINT, SIGTERM};

// Read by the handler: set before it is installed, never changed after. The handler writes to
// wake_fd, and the shim's thread reads from its peer (Note [Waking the shim's thread]).
int wake_fd = -1;
int woken_fd = -1;
dev_t wake_device = 0;
ino_t wake_inode = 0;
ino_t woken_inode = 0;  // on wake_device too
pid_t owner = 0;
std::atomic<int> ending{0};  // the signal being handled; 0 before any
static_assert(std::atomic<int>::is_always_lock_free);

// Async-signal-safe: the default disposition back, and the signal sent again to this process.
void end_by_default(int signal) noexcept {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal, &default_action, nullptr);
  kill(getpid(), signal);
}

// Whether `fd` is still the socket of the shim's that has `inode` (Note [Waking the shim's
// thread]).
bool still_ours(int fd, ino_t inode) noexcept {
  struct stat status {};
  return fstat(fd, &status) == 0 && status.st_dev == wake_device && status.st_ino == inode;
}

// Note [A signal that ends the job]: async-signal-safe throughout.
void on_ending_signal(int signal) {
  const int saved_errno = errno;
  int none = 0;
  const char wake = 1;
  if (getpid() != owner || !ending.compare_exchange_strong(none, signal) || !still_ours(wake_fd, wake_inode) ||
      send(wake_fd, &wake, sizeof wake, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
    end_by_default(signal);
  errno = saved_errno;
}

// Whether the shim's handler is still the one `signal` runs: a program that installed its own
// since and calls the shim's from it (chaining to the handler it found, as signal-hook and
// many runtimes do) handles the signal itself.
bool still_handled_by_the_shim(int signal) noexcept {
  struct sigaction current {};
  return sigaction(signal, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
         current.sa_handler == on_ending_signal;
}

// Ends the process by `signal` once the deadline has passed, from a thread of its own.
void end_after_the_deadline(int signal) noexcept {
  try {
    start_quiet_thread("vramspill-end", [signal] {
      std::this_thread::sleep_for(kLastWordsDeadline);
      end_by_default(signal);
    }).detach();
  } catch (...) {  // no thread: the last words take what they take
  }
}

// Whether `disposition` is the default action: the program has not taken the signal.
bool at_default(const struct sigaction& disposition) {
  return (disposition.sa_flags & SA_SIGINFO) == 0 && disposition.sa_handler == SIG_DFL;
}

void wait_and_end(ShimState& shim) {
  for (;;) {
    // A number the program closed and reused is not read from: its bytes are the program's.
    if (!still_ours(woken_fd, woken_inode)) return;
    char woken = 0;
    const ssize_t got = read(woken_fd, &woken, sizeof woken);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;  // not a wake-up the handler sent: the handler ends alone
    const int signal = ending.load();
    // Note [A handler the program chains to ours]
    if (!still_handled_by_the_shim(signal)) {
      ending.store(0);
      continue;
    }
    end_after_the_deadline(signal);
    write_last_words(shim);
    end_by_default(signal);
    return;
  }
}

}  // namespace

void catch_ending_signals(ShimState& shim) noexcept {
  if (getpid() == 1) return;  // the kernel drops them: Note [A signal that ends the job]
  bool any_default = false;
  for (const int signal : kEndingSignals) {
    struct sigaction current {};
    any_default |= sigaction(signal, nullptr, &current) == 0 && at_default(current);
  }
  if (!any_default) return;  // the program's own dispositions decide
  int pair[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0) {
    wake_fd = telemetry::owned_copy(pair[0]);
    woken_fd = telemetry::owned_copy(pair[1]);
    close(pair[0]);
    close(pair[1]);
  }
  struct stat status {};
  struct stat woken_status {};
  if (wake_fd < 0 || woken_fd < 0 || fstat(wake_fd, &status) != 0 ||
      fstat(woken_fd, &woken_status) != 0) {
    logging::warn("no socket pair for SIGINT and SIGTERM ({}): a job they end leaves no exit "
                  "summary",
                  std::strerror(errno));
    if (wake_fd >= 0) close(wake_fd);
    if (woken_fd >= 0) close(woken_fd);
    wake_fd = woken_fd = -1;
    return;
  }
  wake_device = status.st_dev;
  wake_inode = status.st_ino;
  woken_inode = woken_status.st_ino;
  owner = getpid();
  std::atomic<bool> running{false};
  try {
    start_quiet_thread("vramspill-sig", [&shim, &running] {
      running.store(true, std::memory_order_release);  // `running` is gone after this
      wait_and_end(shim);
    }).detach();
    // Note [A thread started before the program can fork] in hooks/stats_publisher.cpp.
    while (!running.load(std::memory_order_acquire)) std::this_thread::yield();
  } catch (...) {
    logging::warn(
        "cannot start a thread for SIGINT and SIGTERM: a job they end leaves no exit "
        "summary");
    return;
  }
  for (const int signal : kEndingSignals) {
    struct sigaction current {};
    if (sigaction(signal, nullptr, &current) != 0 || !at_default(current)) continue;
    struct sigaction catching {};
    catching.sa_handler = on_ending_signal;
    catching.sa_flags = SA_RESTART;  // the program's interrupted calls go on as if none came
    sigemptyset(&catching.sa_mask);
    // Installed and the disposition read back in one call: a handler the program set on another
    // thread since the look is put back at once rather than replaced.
    struct sigaction before {};
    if (sigaction(signal, &catching, &before) == 0 && !at_default(before))
      sigaction(signal, &before, nullptr);
  }
}

}  // namespace vramspill::hooks
