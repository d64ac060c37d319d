#include "atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <streambuf>

namespace vramspill::cli {
namespace {

namespace fs = std::filesystem;
using Writer = std::function<void(std::ostream&)>;

// How many symbolic links in a row are followed before giving up, as the kernel does (ELOOP).
constexpr int kMaxLinks = 40;

// A stream buffer writing to a file descriptor, which keeps the reason of the first write that
// failed. std::ofstream opens files by name only, and these are opened as mkstemp and
// write_in_place() open them.
class DescriptorBuffer final : public std::streambuf {
 public:
  explicit DescriptorBuffer(int fd) : fd_(fd) { empty(); }
  // The errno of the first write that failed; 0 while none has.
  int error() const { return error_; }

 private:
  int_type overflow(int_type c) override {
    if (sync() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }

  int sync() override {
    for (const char* at = pbase(); at < pptr() && error_ == 0;) {
      const ssize_t written = ::write(fd_, at, static_cast<std::size_t>(pptr() - at));
      if (written > 0) {
        at += written;
      } else if (written == 0 || errno != EINTR) {
        error_ = written == 0 ? EIO : errno;
      }
    }
    empty();
    return error_ == 0 ? 0 : -1;
  }

  void empty() { setp(buffer_.data(), buffer_.data() + buffer_.size()); }

  int fd_;
  int error_ = 0;
  std::array<char, 64 * 1024> buffer_;
};

// Writes `write`'s text to `fd` and closes it; empty, else why not.
std::string write_and_close(int fd, const Writer& write) {
  DescriptorBuffer buffer(fd);
  std::ostream out(&buffer);
  write(out);
  out.flush();
  int error = buffer.error();
  if (close(fd) != 0 && error == 0) error = errno;
  return error == 0 ? "" : std::strerror(error);
}

// The file `path` names once the symbolic links it is are followed (Note [Where -o writes]);
// nullopt, and why in `problem`, when they cannot be. A link to nothing names the file it would
// create.
std::optional<fs::path> follow_links(fs::path path, std::string& problem) {
  for (int links = 0; links <= kMaxLinks; ++links) {
    std::error_code error;
    // Not found, or not to be looked at: the file itself is written (or fails) as it is.
    if (!fs::is_symlink(fs::symlink_status(path, error))) return path;
    const fs::path target = fs::read_symlink(path, error);
    if (error) {
      problem = error.message();
      return std::nullopt;
    }
    path = path.parent_path() / target;  // an absolute target replaces the whole path
  }
  problem = std::strerror(ELOOP);
  return std::nullopt;
}

// A device, FIFO or socket: opened as it is, never created.
std::string write_in_place(const fs::path& path, const Writer& write) {
  const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  return write_and_close(fd, write);
}

// What any new file gets: 0666 less the umask.
mode_t new_file_mode() {
  const mode_t mask = umask(0);
  umask(mask);
  return 0666 & ~mask;
}

// A new file beside `path`, of mode `mode`, renamed over it once written.
std::string replace(const fs::path& path, mode_t mode, const Writer& write) {
  std::string temporary = path.string() + ".XXXXXX";
  const int fd = mkstemp(temporary.data());
  if (fd < 0) return "cannot create a file beside it: " + std::string(std::strerror(errno));
  fchmod(fd, mode);  // mkstemp makes it 0600
  std::string problem = write_and_close(fd, write);
  if (problem.empty() && std::rename(temporary.c_str(), path.c_str()) != 0)
    problem = std::strerror(errno);
  if (!problem.empty()) unlink(temporary.c_str());
  return problem;
}

}  // namespace

std::string write_file_atomically(const std::string& path, const Writer& write) {
  // stat() follows every link, those of /proc/self/fd too, which name a pipe by no path
  // (`-o /dev/stdout | ...`): a device or pipe is written through the path as given.
  struct stat existing {};
  const bool exists = stat(path.c_str(), &existing) == 0;
  if (!exists && errno != ENOENT) return std::strerror(errno);
  if (exists && !S_ISREG(existing.st_mode)) return write_in_place(path, write);
  std::string problem;
  const std::optional<fs::path> target = follow_links(path, problem);
  if (!target) return problem;
  return replace(*target, exists ? existing.st_mode & 07777 : new_file_mode(), write);
}

}  // namespace vramspill::cli
