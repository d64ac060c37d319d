#include "telemetry/process_facts.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

namespace vramspill::telemetry {

uint64_t realtime_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(now.tv_nsec);
}

namespace {

// Reads up to size-1 bytes of a small /proc file into `buffer`; the count read, or -1.
ssize_t read_small_file(const char* path, char* buffer, std::size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t total = 0;
  while (static_cast<std::size_t>(total) + 1 < size) {
    const ssize_t got = read(fd, buffer + total, size - 1 - static_cast<std::size_t>(total));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    total += got;
  }
  ::close(fd);
  buffer[total] = '\0';
  return total;
}

}  // namespace

void read_command(char* command, std::size_t size) noexcept {
  const ssize_t length = read_small_file("/proc/self/cmdline", command, size);
  if (length <= 0) {
    std::snprintf(command, size, "?");
    return;
  }
  for (ssize_t i = 0; i < length; ++i) {
    const auto byte = static_cast<unsigned char>(command[i]);
    if (byte == '\0' || byte < 0x20 || byte == 0x7f) command[i] = ' ';
  }
  for (ssize_t i = length - 1; i >= 0 && command[i] == ' '; --i) command[i] = '\0';
}

}  // namespace vramspill::telemetry
