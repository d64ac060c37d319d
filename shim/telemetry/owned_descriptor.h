// The files the shim writes into the program's process (the log, the trace): opened and held so
// that nothing the program does with its own descriptors mixes their bytes with its own.
//
// Note [The shim's own descriptors]
// The shim writes only to descriptors it opened and owns: a duplicate of standard error made
// when the logger is set up, the [log] file, the [trace] file. Never to descriptor 2 as such: a
// program may run with standard error closed (`prog 2>&-`, daemons), and its next open() then
// gets descriptor 2 (one of its own files, or, on simcuda, the file that holds device memory),
// which a line written to descriptor 2 would corrupt. So:
// - With descriptor 2 closed when the logger is set up, the log goes nowhere (a [log] file
//   still works). A standard error the program opens or replaces later is not the shim's.
// - Nor is a descriptor 2 that is close-on-exec when the logger is set up, which is when the
//   program first reaches the driver, long after it started: an inherited standard error came
//   through an exec, so it cannot be close-on-exec, but a file the program opened after closing
//   its standard error took number 2, and Python opens every file close-on-exec (PEP 446).
//   (A file opened without the flag cannot be told from a standard error by its descriptor.)
// - The shim's descriptors are close-on-exec (an executed program starts its own shim) and
//   numbered kFirstOwnDescriptor or above: never 0-2, and above the numbers that shells and
//   scripts redirect by number (`exec 3>file`, `3>&1`), which a program may dup2() onto.
// - Before each write the holder checks that its descriptor is still the file it was set up
//   with (device and inode): a program that closes descriptors it did not open (closefrom(3)),
//   or dup2()s onto one, and then opens a file that gets the same number must not receive the
//   shim's bytes. Once the check fails, nothing more is written, and the descriptor (now the
//   program's) is never closed.
//
// Note [No SIGPIPE from the shim's writes]
// A write to a pipe or socket whose reader has gone raises SIGPIPE on the writing thread, and its
// default action ends the process. A job whose standard error went to `| head` or a log collector
// that exited first would die at the shim's next log line or its exit summary (status 141), where
// without the shim it wrote nothing more there and ran to its end. So a write to a pipe or socket
// is made with SIGPIPE blocked on the calling thread, and a SIGPIPE it raised is taken back before
// the mask is restored: the line is dropped (EPIPE), as any line the file does not take. A SIGPIPE
// already pending before the write is the program's and stays pending.
//
// Note [A full pipe never holds the job]
// A write to a pipe or socket blocks while it is full. A standard error that nobody reads until
// the job has ended (a parent that waits for its child before it reads the child's output, a
// wedged log collector) fills, and then the shim's next line, which the job without the shim would
// not have written, would hold the job forever, or its exit, where the summary comes after the
// program wrote its last. So a write to a pipe or socket waits for room with poll(), at most
// kFullPipeWait, in pieces the pipe takes whole (PIPE_BUF bytes: a line shorter than that is
// written whole or not at all); what it could not write by then is dropped (EAGAIN). Once a write
// gave up so, the next ones do not wait, writing only what the pipe takes at once, until one is
// written whole again: a job that logs a line per allocation is not slowed by a wait per line.
// The wait is the exit's bound too (kLastWordsDeadline in hooks/shim_state.h is no shorter).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace vramspill::telemetry {

inline constexpr int kFirstOwnDescriptor = 10;

// How long a write waits for room in a full pipe or socket (Note [A full pipe never holds the
// job]).
inline constexpr std::chrono::seconds kFullPipeWait{2};

// A copy of `fd` at kFirstOwnDescriptor or above (below it only if RLIMIT_NOFILE allows no
// more), close-on-exec; -1 when `fd` is not open.
int owned_copy(int fd) noexcept;

// `path` opened with `flags` (plus O_CREAT, mode 0666 before the umask) as a regular file only
// (Note [Only regular files] in config/config.h), as an owned copy; -1 with `problem` set when
// that fails.
int open_owned_file(const std::string& path, int flags, std::string& problem) noexcept;

// An owned descriptor and the file it was set up with (Note [The shim's own descriptors]).
// A copy of standard error for the log, owned as above; -1 when descriptor 2 is closed or
// close-on-exec (then it is not the standard error the program started with).
int standard_error_copy() noexcept;

class OwnedDescriptor {
 public:
  // Takes `fd` (-1: none, every write is dropped).
  explicit OwnedDescriptor(int fd) noexcept;
  // Closes the descriptor, unless it stopped being ours.
  ~OwnedDescriptor();
  OwnedDescriptor(const OwnedDescriptor&) = delete;
  OwnedDescriptor& operator=(const OwnedDescriptor&) = delete;

  // Writes all of `data`. 0 on success; otherwise the errno that stopped it (EAGAIN for a pipe
  // still full when the wait ends: Note [A full pipe never holds the job]; EPIPE for one nobody reads,
  // without a SIGPIPE: Note [No SIGPIPE from the shim's writes]; ENOSPC for a full disk, EFBIG when the write would cross the file size
  // limit and nothing was written: Note [The file size limit] in util/file_size_limit.h; EBADF
  // when the descriptor is no longer ours or there is none), with part of `data` perhaps
  // written.
  int write_all(const char* data, std::size_t size) noexcept;

  bool open() const noexcept { return fd_ >= 0; }

 private:
  int fd_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  bool appends_ = false;  // opened O_APPEND: every write lands at the end
  bool pipe_stalled_ = false;  // the last write to this pipe gave up waiting for room
};

}  // namespace vramspill::telemetry
