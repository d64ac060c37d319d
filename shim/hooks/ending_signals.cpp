#include "hooks/ending_signals.h"

#include <signal.h>
#include <sys/eventfd.h>
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

// Read by the handler: set before it is installed, never changed after.
int wake_fd = -1;
dev_t wake_device = 0;
ino_t wake_inode = 0;
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

bool wake_fd_is_ours() noexcept {
  struct stat status {};
  return fstat(wake_fd, &status) == 0 && status.st_dev == wake_device &&
         status.st_ino == wake_inode;
}

// Note [A signal that ends the job]: async-signal-safe throughout.
void on_ending_signal(int signal) {
  const int saved_errno = errno;
  int none = 0;
  const uint64_t wake = 1;
  if (getpid() != owner || !ending.compare_exchange_strong(none, signal) || !wake_fd_is_ours() ||
      write(wake_fd, &wake, sizeof wake) != static_cast<ssize_t>(sizeof wake))
    end_by_default(signal);
  errno = saved_errno;
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
  uint64_t woken = 0;
  while (read(wake_fd, &woken, sizeof woken) < 0) {
    if (errno != EINTR) return;  // the program closed the descriptor: the handler ends alone
  }
  const int signal = ending.load();
  end_after_the_deadline(signal);
  write_last_words(shim);
  end_by_default(signal);
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
  const int opened = eventfd(0, EFD_CLOEXEC);
  wake_fd = opened >= 0 ? telemetry::owned_copy(opened) : -1;
  if (opened >= 0) close(opened);
  struct stat status {};
  if (wake_fd < 0 || fstat(wake_fd, &status) != 0) {
    logging::warn("no eventfd for SIGINT and SIGTERM ({}): a job they end leaves no exit summary",
                  std::strerror(errno));
    return;
  }
  wake_device = status.st_dev;
  wake_inode = status.st_ino;
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
