// Where `-o` writes (tools/cli/atomic_file.h, Note [Where -o writes]): a new or regular file is
// replaced whole, keeping its permissions; a symbolic link is written through; a device or FIFO
// is written in place, never replaced; a write that fails leaves the old file and nothing else.
#include "atomic_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "scratch_directory.h"

namespace vramspill::cli {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public vramspill::testing::ScratchDirectoryTest {
 protected:
  std::string path(const std::string& name) const { return (root_ / name).string(); }

  // What write_file_atomically says, writing `text` to `target`.
  static std::string write(const std::string& target, const std::string& text) {
    return write_file_atomically(target, [&](std::ostream& out) { out << text; });
  }

  static std::string read(const std::string& file) {
    std::ostringstream text;
    text << std::ifstream(file).rdbuf();
    return text.str();
  }

  // The names in the scratch directory: no file beside the target may be left behind.
  std::set<std::string> names() const {
    std::set<std::string> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(root_))
      found.insert(entry.path().filename().string());
    return found;
  }

  static mode_t mode_of(const std::string& file) {
    struct stat facts {};
    EXPECT_EQ(lstat(file.c_str(), &facts), 0) << file;
    return facts.st_mode;
  }

  // A character device node `major`:`minor` named `name`, which this process can open for
  // writing; empty where it cannot make one (not root, or a nodev mount).
  std::string device(const std::string& name, unsigned major, unsigned minor) const {
    const std::string node = path(name);
    if (mknod(node.c_str(), S_IFCHR | 0666, makedev(major, minor)) != 0) return "";
    const int fd = open(node.c_str(), O_WRONLY);
    if (fd < 0) return "";
    close(fd);
    return node;
  }
};

TEST_F(AtomicFileTest, a_new_file_gets_the_mode_any_new_file_gets) {
  const mode_t saved = umask(022);
  const std::string problem = write(path("out"), "text");
  umask(saved);
  ASSERT_EQ(problem, "");
  EXPECT_EQ(read(path("out")), "text");
  EXPECT_EQ(mode_of(path("out")) & 07777, 0644u);
  EXPECT_EQ(names(), std::set<std::string>{"out"});
}

TEST_F(AtomicFileTest, an_existing_file_is_replaced_and_keeps_its_permissions) {
  std::ofstream(path("out")) << "an older, longer text";
  ASSERT_EQ(chmod(path("out").c_str(), 0600), 0);
  ASSERT_EQ(write(path("out"), "text"), "");
  EXPECT_EQ(read(path("out")), "text");
  EXPECT_EQ(mode_of(path("out")), S_IFREG | 0600);
  EXPECT_EQ(names(), std::set<std::string>{"out"});
}

TEST_F(AtomicFileTest, a_symbolic_link_is_written_through_and_stays_a_link) {
  fs::create_directory(root_ / "data");
  std::ofstream(path("data/real")) << "old";
  ASSERT_EQ(chmod(path("data/real").c_str(), 0640), 0);
  fs::create_symlink("data/real", root_ / "out");  // relative: to the link's directory
  ASSERT_EQ(write(path("out"), "text"), "");
  EXPECT_TRUE(fs::is_symlink(root_ / "out"));
  EXPECT_EQ(read(path("data/real")), "text");
  EXPECT_EQ(mode_of(path("data/real")), S_IFREG | 0640);

  // A link to nothing yet: the file it names is made, as `>` makes it.
  fs::create_symlink(root_ / "data/new", root_ / "dangling");
  ASSERT_EQ(write(path("dangling"), "new"), "");
  EXPECT_TRUE(fs::is_symlink(root_ / "dangling"));
  EXPECT_EQ(read(path("data/new")), "new");
  EXPECT_EQ(names(), (std::set<std::string>{"data", "dangling", "out"}));
  EXPECT_EQ(std::distance(fs::directory_iterator(root_ / "data"), fs::directory_iterator()), 2);

  fs::create_symlink("loop", root_ / "loop");
  EXPECT_EQ(write(path("loop"), "text"), "Too many levels of symbolic links");
}

TEST_F(AtomicFileTest, a_fifo_is_written_in_place) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Opened for reading first, without waiting for a writer, so that the write does not block.
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const std::string problem = write(fifo, "through the pipe");
  char got[64] = {};
  const ssize_t count = ::read(reader, got, sizeof got);
  close(reader);
  EXPECT_EQ(problem, "");
  EXPECT_TRUE(S_ISFIFO(mode_of(fifo))) << "the FIFO was replaced";
  EXPECT_EQ(std::string(got, count > 0 ? static_cast<std::size_t>(count) : 0),
            "through the pipe");
  EXPECT_EQ(names(), std::set<std::string>{"fifo"});
}

// As root, renaming a file over /dev/null would replace it for the whole machine: a node of its
// own, 1:3, stands for it (and 1:7 for /dev/full).
TEST_F(AtomicFileTest, a_device_is_written_in_place_and_its_error_told) {
  const std::string null = device("null", 1, 3);
  const std::string full = device("full", 1, 7);
  if (null.empty() || full.empty()) GTEST_SKIP() << "cannot make a device node here (needs root)";
  EXPECT_EQ(write(null, "text"), "");
  EXPECT_TRUE(S_ISCHR(mode_of(null))) << "the device node was replaced";
  EXPECT_EQ(write(full, std::string(1 << 20, 'x')), "No space left on device");
  EXPECT_TRUE(S_ISCHR(mode_of(full))) << "the device node was replaced";
  EXPECT_EQ(names(), (std::set<std::string>{"full", "null"}));
}

// A file size limit stands for a full disk: the write fails part way, with EFBIG.
TEST_F(AtomicFileTest, a_write_that_fails_leaves_the_old_file_and_nothing_beside_it) {
  std::ofstream(path("out")) << "old";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{.rlim_cur = 4096, .rlim_max = 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    _exit(write(path("out"), std::string(1 << 20, 'x')).ends_with("File too large") ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the failure was not told";
  EXPECT_EQ(read(path("out")), "old");
  EXPECT_EQ(names(), std::set<std::string>{"out"});
}

}  // namespace
}  // namespace vramspill::cli
