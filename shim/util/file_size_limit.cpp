#include "util/file_size_limit.h"

#include <sys/resource.h>

namespace vramspill {

bool within_file_size_limit(uint64_t end) noexcept {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return true;
  return end <= limit.rlim_cur;
}

}  // namespace vramspill
