#include "config/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "config/options.h"
#include "util/bytes.h"

namespace vramspill {

uint64_t Budget::resolve(uint64_t total) const {
  if (!is_fraction_) return std::min(bytes_, total);
  // long double keeps every byte of totals up to 2^64 exact before the fraction is applied, so
  // 100% is exactly the total.
  const long double bytes = std::floor(static_cast<long double>(total) * fraction_);
  if (!(bytes < static_cast<long double>(total))) return total;  // also NaN
  return bytes > 0 ? static_cast<uint64_t>(bytes) : 0;
}

uint64_t DeviceConfig::limit(uint64_t device_total) const {
  const uint64_t allowed = budget.resolve(device_total);
  return allowed > reserve_bytes ? allowed - reserve_bytes : 0;
}

std::string DeviceConfig::nothing_left(uint64_t device_total) const {
  if (limit(device_total) > 0) return "";
  const std::string total =
      format_bytes(device_total) + " (" + std::to_string(device_total) + " bytes)";
  const uint64_t allowed = budget.resolve(device_total);
  std::string budget_text;
  if (budget.is_fraction()) {
    char percent[32];
    std::snprintf(percent, sizeof percent, "%g%%", budget.fraction_of_total() * 100);
    budget_text = "device.budget = " + std::string(percent) + " of the device's " + total +
                  " is " + format_bytes(allowed);
  } else if (budget.byte_count() > device_total) {
    budget_text = "device.budget = " + format_bytes(budget.byte_count()) +
                  " is capped at the device's " + total;
  } else {
    budget_text = "device.budget = " + format_bytes(allowed) + " of the device's " + total;
  }
  return budget_text + ", and device.reserve = " + format_bytes(reserve_bytes) +
         " is kept free below it: nothing is left to allocate (every allocation would be "
         "refused); lower device.reserve or raise device.budget";
}

namespace {

// What a path that is not a regular file is, for the error message.
std::string_view file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string not_regular(mode_t mode) {
  const std::string_view type = file_type_name(mode);
  if (type.starts_with("not ")) return "it is " + std::string(type);
  return "it is " + std::string(type) + ", not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, int flags, unsigned mode,
                      std::string& problem) noexcept {
  try {
    // Note [Only regular files]
    const int fd = open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
    struct stat status {};
    if (fd < 0) {
      const int error = errno;
      // Opening a directory for writing, or a FIFO without a reader, fails with an error that
      // does not say what the path is (EISDIR, ENXIO): say it.
      if (stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode))
        problem = not_regular(status.st_mode);
      else
        problem = std::strerror(error);
      return -1;
    }
    const bool checked = fstat(fd, &status) == 0;
    const int error = errno;
    if (checked && S_ISREG(status.st_mode)) return fd;
    close(fd);
    problem = checked ? not_regular(status.st_mode) : std::strerror(error);
    return -1;
  } catch (...) {  // out of memory building the message
    return -1;
  }
}

Config default_config() {
  Config config;
  for (const OptionSpec& option : options()) {
    // A default that does not parse is a bug in the table, caught by config_test; here it keeps
    // the placeholder rather than stopping the program.
    const ParsedOption parsed = parse_option_text(option, option.default_text);
    if (parsed.ok()) option.store(config, *parsed.value);
  }
  return config;
}

}  // namespace vramspill
