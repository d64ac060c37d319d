#include "atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

namespace vramspill::cli {

std::string write_file_atomically(const std::string& path,
                                  const std::function<void(std::ostream&)>& write) {
  std::vector<char> temporary(path.begin(), path.end());
  for (const char c : std::string_view(".XXXXXX")) temporary.push_back(c);
  temporary.push_back('\0');
  const int fd = mkstemp(temporary.data());
  if (fd < 0) return "cannot create a file beside it: " + std::string(std::strerror(errno));
  // mkstemp makes it 0600; give it the mode any new file gets.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  close(fd);
  const std::string name = temporary.data();
  {
    std::ofstream out(name, std::ios::binary | std::ios::trunc);
    write(out);
    out.close();
    if (!out) {
      const std::string problem = "cannot write " + name + ": " + std::strerror(errno);
      unlink(name.c_str());
      return problem;
    }
  }
  if (std::rename(name.c_str(), path.c_str()) != 0) {
    const std::string problem = std::strerror(errno);
    unlink(name.c_str());
    return problem;
  }
  return "";
}

}  // namespace vramspill::cli
