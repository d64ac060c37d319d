// The stats segment's writer (telemetry/stats_file.h) and reader (tools/cli/stats_reader.h),
// driven directly: figures round-trip, permissions, the directory checks of Note [Stats
// directory], files left by processes that are gone (Note [Stats liveness]), and files others
// damaged (Note [Stats segment consistency]). stats_job_test.cpp runs real jobs under the shim.
#include "telemetry/stats_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>

#include "telemetry/owned_descriptor.h"
#include "telemetry/stats_directory.h"
#include "stats_reader.h"

namespace {

namespace fs = std::filesystem;
using namespace vramspill::telemetry;

constexpr uid_t kSomeoneElse = 65534;  // nobody

// The shim keeps its StatsFile in a global: it must need no constructor or destructor to run
// when the library is loaded or unloaded (Note [Entering the shim] in hooks/shim_state.h).
constinit StatsFile g_global_stats_file;
static_assert(std::is_trivially_destructible_v<StatsFile>);

// A fresh directory per test, removed afterwards; `dir()` is where stats files go (not created).
class StatsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vramspill-stats-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    directory_ = root_ / "stats";
  }
  void TearDown() override {
    stats_.close();
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  std::string dir() const { return directory_.string(); }
  std::string own_file() const { return dir() + "/" + std::to_string(getpid()) + ".stats"; }

  // The segment in `path` as it is, and written back with a correct checksum (a file another
  // writer published, as far as a reader can tell).
  static StatsSegment read_segment(const std::string& path) {
    StatsSegment segment{};
    std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&segment), sizeof segment);
    return segment;
  }
  static void write_segment(const std::string& path, StatsSegment segment) {
    segment.checksum = stats_checksum(segment);
    const int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(pwrite(fd, &segment, sizeof segment, 0), static_cast<ssize_t>(sizeof segment));
    close(fd);
  }

  static unsigned mode_of(const std::string& path) {
    struct stat info {};
    EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
    return info.st_mode & 07777;
  }

  fs::path root_;
  fs::path directory_;
  StatsFile stats_;
};

TEST_F(StatsFileTest, figures_round_trip_from_writer_to_reader) {
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  EXPECT_EQ(std::string(stats_.path()), own_file());

  const std::array<DeviceFigures, 2> devices = {
      DeviceFigures{0, 80ULL << 30, 20ULL << 30, 19ULL << 30, 20ULL << 30, 3ULL << 30, 1ULL << 20,
                    42, 1},
      DeviceFigures{2, 40ULL << 30, 10ULL << 30, 5, 6, 7, 8, 9, 10}};
  stats_.publish({.host_pool_pinned_bytes = 8ULL << 30,
                  .host_spilled_bytes = 3ULL << 30,
                  .host_limit_bytes = 48ULL << 30,
                  .devices = devices});

  const StatsEntry entry = read_stats_file(own_file());
  ASSERT_EQ(entry.state, StatsState::kLive) << entry.problem;
  const StatsSnapshot& snapshot = entry.snapshot;
  EXPECT_EQ(snapshot.pid, static_cast<uint64_t>(getpid()));
  EXPECT_NE(snapshot.command.find("vramspill_stats_test"), std::string::npos) << snapshot.command;
  EXPECT_GT(snapshot.updated_unix_ns, 0U);
  EXPECT_GE(snapshot.updated_unix_ns, snapshot.started_unix_ns);
  EXPECT_EQ(snapshot.publish_count, 1U);
  EXPECT_EQ(snapshot.host_pool_pinned_bytes, 8ULL << 30);
  EXPECT_EQ(snapshot.host_spilled_bytes, 3ULL << 30);
  EXPECT_EQ(snapshot.host_limit_bytes, 48ULL << 30);
  ASSERT_EQ(snapshot.devices.size(), 2U);  // ordinal 1 was never published
  const DeviceFigures& first = snapshot.devices[0];
  EXPECT_EQ(first.device, 0);
  EXPECT_EQ(first.total_bytes, 80ULL << 30);
  EXPECT_EQ(first.limit_bytes, 20ULL << 30);
  EXPECT_EQ(first.device_bytes, 19ULL << 30);
  EXPECT_EQ(first.device_peak_bytes, 20ULL << 30);
  EXPECT_EQ(first.spilled_managed_bytes, 3ULL << 30);
  EXPECT_EQ(first.spilled_host_bytes, 1ULL << 20);
  EXPECT_EQ(first.spills, 42U);
  EXPECT_EQ(first.refused, 1U);
  const DeviceFigures& third = snapshot.devices[1];
  EXPECT_EQ(third.device, 2);
  EXPECT_EQ(third.total_bytes, 40ULL << 30);
  EXPECT_EQ(third.limit_bytes, 10ULL << 30);
  EXPECT_EQ(third.device_bytes, 5U);
  EXPECT_EQ(third.device_peak_bytes, 6U);
  EXPECT_EQ(third.spilled_managed_bytes, 7U);
  EXPECT_EQ(third.spilled_host_bytes, 8U);
  EXPECT_EQ(third.spills, 9U);
  EXPECT_EQ(third.refused, 10U);

  // A later publish replaces every figure; an ordinal beyond the slots is left out.
  std::array<DeviceFigures, 2> later{};
  later[0].device_bytes = 1;
  later[1].device = 99;
  later[1].device_bytes = 1;
  ProcessFigures figures;
  figures.devices = later;
  stats_.publish(figures);
  const StatsEntry again = read_stats_file(own_file());
  ASSERT_EQ(again.state, StatsState::kLive);
  EXPECT_EQ(again.snapshot.publish_count, 2U);
  ASSERT_EQ(again.snapshot.devices.size(), 1U);
  EXPECT_EQ(again.snapshot.devices[0].device_bytes, 1U);
  EXPECT_EQ(again.snapshot.devices[0].total_bytes, 0U);
  EXPECT_EQ(again.snapshot.host_spilled_bytes, 0U);
}

TEST_F(StatsFileTest, file_is_0600_and_directory_0700_whatever_the_umask) {
  const mode_t old_umask = umask(0777);
  const bool opened = stats_.open_in(dir().c_str());
  umask(old_umask);
  ASSERT_TRUE(opened);
  EXPECT_EQ(mode_of(dir()), 0700U);
  EXPECT_EQ(mode_of(own_file()), 0600U);
}

TEST_F(StatsFileTest, remove_deletes_the_file_and_stops_publishing) {
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  ASSERT_TRUE(fs::exists(own_file()));
  stats_.remove();
  EXPECT_FALSE(fs::exists(own_file()));
  EXPECT_FALSE(stats_.is_open());
  stats_.publish({});  // a no-op, not a crash
  stats_.remove();     // twice is fine
}

TEST_F(StatsFileTest, a_forked_child_leaves_the_parents_file_alone) {
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ProcessFigures figures;
    figures.host_spilled_bytes = 123;
    stats_.publish(figures);
    stats_.remove();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const StatsEntry entry = read_stats_file(own_file());
  ASSERT_EQ(entry.state, StatsState::kLive);
  EXPECT_EQ(entry.snapshot.host_spilled_bytes, 0U);
  EXPECT_EQ(entry.snapshot.publish_count, 0U);
}

TEST_F(StatsFileTest, refuses_a_directory_other_users_can_reach) {
  ASSERT_EQ(mkdir(dir().c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir().c_str(), 0755), 0);
  EXPECT_FALSE(stats_.open_in(dir().c_str()));
  EXPECT_FALSE(stats_.is_open());
  EXPECT_FALSE(fs::exists(own_file()));
  const StatsDirectory opened = open_stats_directory(dir().c_str(), false);
  EXPECT_EQ(opened.fd, -1);
  EXPECT_NE(std::string(opened.problem).find("mode 0755"), std::string::npos) << opened.problem;
}

TEST_F(StatsFileTest, refuses_a_directory_owned_by_someone_else) {
  std::string directory = dir();
  if (geteuid() == 0) {
    // Root can give a directory away; as another user, "/" is one we do not own.
    ASSERT_EQ(mkdir(directory.c_str(), 0700), 0);
    ASSERT_EQ(chown(directory.c_str(), kSomeoneElse, kSomeoneElse), 0);
  } else {
    directory = "/";
  }
  EXPECT_FALSE(stats_.open_in(directory.c_str()));
  const StatsDirectory opened = open_stats_directory(directory.c_str(), false);
  EXPECT_EQ(opened.fd, -1);
  EXPECT_NE(std::string(opened.problem).find("not by this user"), std::string::npos)
      << opened.problem;
}

TEST_F(StatsFileTest, refuses_a_symbolic_link_to_a_directory) {
  const fs::path real = root_ / "real";
  ASSERT_EQ(mkdir(real.c_str(), 0700), 0);
  fs::create_directory_symlink(real, directory_);
  EXPECT_FALSE(stats_.open_in(dir().c_str()));
  EXPECT_TRUE(fs::is_empty(real));
}

TEST_F(StatsFileTest, replaces_a_planted_symbolic_link_instead_of_following_it) {
  ASSERT_EQ(mkdir(dir().c_str(), 0700), 0);
  const fs::path victim = root_ / "victim";
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, own_file());
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(own_file())));
  EXPECT_EQ(mode_of(own_file()), 0600U);
  std::ifstream in(victim);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "keep me");
  EXPECT_EQ(fs::file_size(victim), 7U);
}

TEST_F(StatsFileTest, reader_refuses_files_it_cannot_trust) {
  ASSERT_EQ(mkdir(dir().c_str(), 0700), 0);
  const std::string short_file = dir() + "/1.stats";
  std::ofstream(short_file) << "not a stats segment";
  EXPECT_EQ(read_stats_file(short_file).state, StatsState::kInvalid);

  const std::string link = dir() + "/2.stats";
  fs::create_symlink(short_file, link);
  EXPECT_EQ(read_stats_file(link).state, StatsState::kInvalid);

  // Empty: being created. The right size, but zeros: not a stats file.
  const std::string unready = dir() + "/3.stats";
  { std::ofstream create(unready); }
  EXPECT_EQ(read_stats_file(unready).state, StatsState::kNotReady);
  fs::resize_file(unready, sizeof(StatsSegment));
  EXPECT_EQ(read_stats_file(unready).state, StatsState::kInvalid);

  if (geteuid() == 0) {  // only root can make a file someone else's
    ASSERT_TRUE(stats_.open_in(dir().c_str()));
    ASSERT_EQ(chown(own_file().c_str(), kSomeoneElse, kSomeoneElse), 0);
    const StatsEntry entry = read_stats_file(own_file());
    EXPECT_EQ(entry.state, StatsState::kInvalid);
    EXPECT_NE(entry.problem.find("owned by uid"), std::string::npos) << entry.problem;
  }
}

TEST_F(StatsFileTest, files_of_dead_processes_are_stale_and_removed_on_request) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StatsFile file;
    _exit(file.open_in(dir().c_str()) ? 0 : 1);  // killed, in effect: no remove()
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string left = dir() + "/" + std::to_string(child) + ".stats";
  ASSERT_TRUE(fs::exists(left));
  ASSERT_TRUE(stats_.open_in(dir().c_str()));  // a live one next to it

  const std::vector<StatsEntry> kept = scan_stats_directory(dir(), /*remove_stale=*/false);
  ASSERT_EQ(kept.size(), 2U);
  for (const StatsEntry& entry : kept) {
    const bool is_child = entry.snapshot.pid == static_cast<uint64_t>(child);
    EXPECT_EQ(entry.state, is_child ? StatsState::kStale : StatsState::kLive) << entry.path;
  }
  EXPECT_TRUE(fs::exists(left));

  scan_stats_directory(dir(), /*remove_stale=*/true);
  EXPECT_FALSE(fs::exists(left));
  EXPECT_TRUE(fs::exists(own_file()));
}

// Note [An empty stats file]: a job killed between creating its file and writing it leaves it
// empty. Past the grace, with its lock free, it is stale: readers remove it, and a new writer of
// its name takes the name. Younger, or locked, it is a file being created, and stays.
TEST_F(StatsFileTest, an_empty_file_past_the_grace_is_stale) {
  ASSERT_TRUE(fs::create_directory(directory_));
  fs::permissions(directory_, fs::perms::owner_all);  // as a writer makes it
  const auto make_empty = [&](const std::string& name, int64_t age_seconds) {
    const std::string path = dir() + "/" + name;
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0) << path;
    const timespec then{time(nullptr) - age_seconds, 0};
    const timespec times[2] = {then, then};
    EXPECT_EQ(futimens(fd, times), 0);
    return fd;
  };
  const std::string old_name = "4001.stats";
  const std::string young_name = "4002.stats";
  const std::string locked_name = "4003.stats";
  close(make_empty(old_name, 60));
  close(make_empty(young_name, 0));
  const int locked = make_empty(locked_name, 60);
  ASSERT_EQ(flock(locked, LOCK_EX | LOCK_NB), 0);  // a writer between its lock and its write

  for (const StatsEntry& entry : scan_stats_directory(dir(), /*remove_stale=*/true)) {
    const bool is_old = entry.path == dir() + "/" + old_name;
    EXPECT_EQ(entry.state, is_old ? StatsState::kStale : StatsState::kNotReady) << entry.path;
  }
  EXPECT_FALSE(fs::exists(dir() + "/" + old_name));
  EXPECT_TRUE(fs::exists(dir() + "/" + young_name));
  EXPECT_TRUE(fs::exists(dir() + "/" + locked_name));
  close(locked);

  // A writer whose name an empty file past the grace holds takes the name.
  close(make_empty(std::to_string(getpid()) + ".stats", 60));
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  EXPECT_EQ(std::string(stats_.path()), own_file());
}

TEST_F(StatsFileTest, liveness_is_the_lock_not_the_pid) {
  // A live writer whose pid means nothing here (another PID namespace sharing the directory):
  // this process holds the lock, the file names a pid that has exited.
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  StatsSegment segment = read_segment(own_file());
  segment.pid = static_cast<uint64_t>(child);
  write_segment(own_file(), segment);

  const StatsEntry entry = read_stats_file(own_file());
  ASSERT_EQ(entry.state, StatsState::kLive) << entry.problem;
  EXPECT_EQ(entry.snapshot.pid, static_cast<uint64_t>(child));
  scan_stats_directory(dir(), /*remove_stale=*/true);
  EXPECT_TRUE(fs::exists(own_file()));

  // What keeps it: the writer's lock, which nobody else can take while it runs.
  const int fd = open(own_file().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0) << "the writer holds no lock";
  close(fd);
}

TEST_F(StatsFileTest, a_name_held_by_a_live_process_is_not_taken) {
  // Two writers with one pid: the second is, for the file names, a process of another PID
  // namespace with the same pid.
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  StatsFile other;
  ASSERT_TRUE(other.open_in(dir().c_str()));
  EXPECT_EQ(std::string(other.path()), dir() + "/" + std::to_string(getpid()) + "-1.stats");
  EXPECT_EQ(read_stats_file(own_file()).state, StatsState::kLive);
  EXPECT_EQ(read_stats_file(other.path()).state, StatsState::kLive);
  other.close();
}

TEST_F(StatsFileTest, the_file_never_takes_a_number_the_program_may_reuse) {
  // A program that closed its standard streams: the file must not become its stdin, stdout or
  // stderr, where the program's own writes would land in it; nor take 3-9, which a shell's
  // `exec 3>file` or the program's dup2() may take over, dropping the lock that says it lives.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int fd = 0; fd < kFirstOwnDescriptor; ++fd) close(fd);
    if (!stats_.open_in(dir().c_str())) _exit(2);
    for (int fd = 0; fd < kFirstOwnDescriptor; ++fd)
      if (fcntl(fd, F_GETFD) != -1) _exit(3);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: not opened, 3: a number below 10 was taken";
}

TEST_F(StatsFileTest, reader_survives_files_truncated_grown_or_scribbled_on) {
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  stats_.publish({});
  const std::string path = own_file();
  const auto state_after = [&](auto damage) {
    damage();
    const StatsEntry entry = read_stats_file(path);
    stats_.publish({});  // the writer puts the whole segment back
    EXPECT_EQ(read_stats_file(path).state, StatsState::kLive);
    return entry;
  };
  EXPECT_EQ(state_after([&] { fs::resize_file(path, 0); }).state, StatsState::kNotReady);
  StatsEntry entry = state_after([&] { fs::resize_file(path, sizeof(StatsSegment) / 2); });
  EXPECT_EQ(entry.state, StatsState::kInvalid);
  EXPECT_NE(entry.problem.find("size"), std::string::npos) << entry.problem;
  entry = state_after([&] { fs::resize_file(path, sizeof(StatsSegment) + 4096); });
  EXPECT_EQ(entry.state, StatsState::kInvalid);
  entry = state_after([&] {
    StatsSegment segment = read_segment(path);
    segment.devices[3].spills = 7;  // not what the writer wrote: the checksum says so
    std::ofstream(path, std::ios::binary | std::ios::in)
        .write(reinterpret_cast<const char*>(&segment), sizeof segment);
  });
  EXPECT_EQ(entry.state, StatsState::kInvalid);
  EXPECT_NE(entry.problem.find("checksum"), std::string::npos) << entry.problem;
  entry = state_after([&] {
    std::ofstream(path, std::ios::binary | std::ios::in) << std::string(sizeof(StatsSegment), 'x');
  });
  EXPECT_EQ(entry.state, StatsState::kInvalid);
  EXPECT_NE(entry.problem.find("magic"), std::string::npos) << entry.problem;
  // None of them was taken for a file left by a dead process.
  scan_stats_directory(dir(), /*remove_stale=*/true);
  EXPECT_TRUE(fs::exists(path));
}

TEST_F(StatsFileTest, reader_survives_a_file_truncated_while_it_reads) {
  // Someone truncates and regrows the file as fast as they can while it is read: a reader that
  // mapped the file would die of SIGBUS reading past the new end.
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  stats_.publish({});
  const std::string path = own_file();
  std::atomic<bool> stop{false};
  std::thread truncator([&] {
    const int fd = open(path.c_str(), O_WRONLY);
    while (!stop.load()) {
      (void)!ftruncate(fd, 0);
      (void)!ftruncate(fd, sizeof(StatsSegment));
    }
    close(fd);
  });
  int stale = 0;
  for (int i = 0; i < 20000; ++i) stale += read_stats_file(path).state == StatsState::kStale;
  stop.store(true);
  truncator.join();
  // Whatever the race showed it (whole, empty, cut short), a live writer's file is never stale.
  EXPECT_EQ(stale, 0);
}

TEST(StatsDirectoryPath, xdg_runtime_dir_when_usable_else_tmp) {
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string restore = saved != nullptr ? saved : "";
  char path[4096];
  char fallback[4096];
  ASSERT_TRUE(fallback_stats_directory_path(fallback));
  EXPECT_EQ(std::string(fallback), "/tmp/vramspill-" + std::to_string(geteuid()));

  char pattern[] = "/tmp/vramspill-xdg-test-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  setenv("XDG_RUNTIME_DIR", pattern, 1);
  ASSERT_TRUE(stats_directory_path(path));
  EXPECT_EQ(std::string(path), std::string(pattern) + "/vramspill");

  for (const char* unusable : {"relative/dir", "/nonexistent/vramspill-test", ""}) {
    setenv("XDG_RUNTIME_DIR", unusable, 1);
    ASSERT_TRUE(stats_directory_path(path));
    EXPECT_STREQ(path, fallback) << "XDG_RUNTIME_DIR=" << unusable;
  }
  rmdir(pattern);
  if (saved != nullptr)
    setenv("XDG_RUNTIME_DIR", restore.c_str(), 1);
  else
    unsetenv("XDG_RUNTIME_DIR");
}

}  // namespace
