#include "telemetry/owned_descriptor.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <csignal>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "config/config.h"
#include "util/file_size_limit.h"

namespace vramspill::telemetry {
namespace {

// SIGPIPE blocked on the calling thread for its lifetime (Note [No SIGPIPE from the shim's
// writes]); one raised meanwhile (taken_back() says so) is taken back before the mask is restored.
class SigpipeHeldOff {
 public:
  SigpipeHeldOff() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    already_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    held_ = pthread_sigmask(SIG_BLOCK, &pipe_, &before_) == 0;
  }
  ~SigpipeHeldOff() {
    if (!held_) return;
    if (raised_ && !already_pending_) {
      const timespec now{};
      while (sigtimedwait(&pipe_, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  SigpipeHeldOff(const SigpipeHeldOff&) = delete;
  SigpipeHeldOff& operator=(const SigpipeHeldOff&) = delete;

  // The write failed with EPIPE: the kernel raised SIGPIPE for it.
  void raised() noexcept { raised_ = true; }

 private:
  sigset_t pipe_{};
  sigset_t before_{};
  bool already_pending_ = false;
  bool held_ = false;
  bool raised_ = false;
};

// The write loop of OwnedDescriptor::write_all.
int write_whole(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return errno;
    if (written == 0) return EIO;
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  return 0;
}

// Waits until there is room in the pipe or socket `fd` (or an error that a write will report):
// false once `give_up` has passed.
bool wait_for_room(int fd, std::chrono::steady_clock::time_point give_up) noexcept {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    pollfd watched{fd, POLLOUT, 0};
    const int ready = ::poll(&watched, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready > 0 || (ready < 0 && errno != EINTR)) return true;
    if (ready == 0) return false;
  }
}

// write_whole for a pipe or socket (Note [A full pipe never holds the job]): in pieces it takes
// whole, each once it has room, until `give_up`.
int write_whole_waiting(int fd, const char* data, std::size_t size,
                        std::chrono::steady_clock::time_point give_up) noexcept {
  while (size > 0) {
    if (!wait_for_room(fd, give_up)) return EAGAIN;
    const ssize_t written = ::write(fd, data, std::min<std::size_t>(size, PIPE_BUF));
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && errno == EAGAIN) {  // non-blocking, and another writer took the room
      if (std::chrono::steady_clock::now() >= give_up) return EAGAIN;
      ::poll(nullptr, 0, 1);
      continue;
    }
    if (written < 0) return errno;
    if (written == 0) return EIO;
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  return 0;
}

}  // namespace

int owned_copy(int fd) noexcept {
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, kFirstOwnDescriptor);
  if (copy >= 0 || errno != EINVAL) return copy;
  return fcntl(fd, F_DUPFD_CLOEXEC, 3);  // EINVAL: the limit is below kFirstOwnDescriptor
}

int standard_error_copy() noexcept {
  const int flags = fcntl(STDERR_FILENO, F_GETFD);
  if (flags < 0 || (flags & FD_CLOEXEC) != 0) return -1;
  return owned_copy(STDERR_FILENO);
}

int open_owned_file(const std::string& path, int flags, std::string& problem) noexcept {
  const int opened = open_regular_file(path, flags | O_CREAT, 0666, problem);
  if (opened < 0) return -1;
  // open() took the lowest free number, which is 0-2 when the program closed those.
  const int owned = owned_copy(opened);
  if (owned < 0) problem = std::strerror(errno);
  close(opened);
  return owned;
}

OwnedDescriptor::OwnedDescriptor(int fd) noexcept : fd_(fd) {
  struct stat status {};
  if (fd_ >= 0 && fstat(fd_, &status) == 0) {
    device_ = status.st_dev;
    inode_ = status.st_ino;
    const int flags = fcntl(fd_, F_GETFL);
    appends_ = flags >= 0 && (flags & O_APPEND) != 0;
  } else {
    fd_ = -1;
  }
}

OwnedDescriptor::~OwnedDescriptor() {
  if (fd_ >= 0) close(fd_);
}

int OwnedDescriptor::write_all(const char* data, std::size_t size) noexcept {
  if (fd_ < 0) return EBADF;
  struct stat status {};
  if (fstat(fd_, &status) != 0 || status.st_dev != device_ || status.st_ino != inode_) {
    fd_ = -1;  // no longer ours: never written to again, never closed
    return EBADF;
  }
  if (S_ISREG(status.st_mode)) {  // Note [The file size limit]
    const off_t position = appends_ ? status.st_size : lseek(fd_, 0, SEEK_CUR);
    if (!within_file_size_limit(static_cast<uint64_t>(std::max<off_t>(position, 0)) + size))
      return EFBIG;
  }
  if (!S_ISFIFO(status.st_mode) && !S_ISSOCK(status.st_mode)) return write_whole(fd_, data, size);
  SigpipeHeldOff held_off;  // Note [No SIGPIPE from the shim's writes]
  const auto now = std::chrono::steady_clock::now();
  const int error = write_whole_waiting(fd_, data, size, pipe_stalled_ ? now : now + kFullPipeWait);
  pipe_stalled_ = error == EAGAIN;
  if (error == EPIPE) held_off.raised();
  return error;
}

}  // namespace vramspill::telemetry
