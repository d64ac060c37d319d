// The stats segment's writer (telemetry/stats_file.h) and reader (telemetry/stats_reader.h),
// driven directly: figures round-trip, permissions, the directory checks of Note [Stats
// directory], and files left by processes that are gone.
#include "telemetry/stats_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>

#include "telemetry/stats_directory.h"
#include "telemetry/stats_reader.h"

namespace {

namespace fs = std::filesystem;
using namespace vramspill::telemetry;

constexpr uid_t kSomeoneElse = 65534;  // nobody

// The shim keeps its StatsFile in a global: it must need no constructor or destructor to run
// when the library is loaded or unloaded (DESIGN.md section 4).
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
  EXPECT_EQ(snapshot.start_time_ticks, process_start_time(getpid()).value());
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

  // A later publish replaces the figures; an ordinal beyond the slots is left out.
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
  EXPECT_EQ(again.snapshot.devices.size(), 2U);
  EXPECT_EQ(again.snapshot.devices[0].device_bytes, 1U);
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

  // The right size, but no magic yet: being created.
  const std::string unready = dir() + "/3.stats";
  { std::ofstream create(unready); }
  fs::resize_file(unready, sizeof(StatsSegment));
  EXPECT_EQ(read_stats_file(unready).state, StatsState::kNotReady);

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

TEST_F(StatsFileTest, a_reused_pid_is_told_apart_by_the_start_time) {
  ASSERT_TRUE(stats_.open_in(dir().c_str()));
  ASSERT_EQ(read_stats_file(own_file()).state, StatsState::kLive);
  // Pretend the file was written by an earlier process that had our pid.
  const int fd = open(own_file().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* mapped = mmap(nullptr, sizeof(StatsSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* segment = static_cast<StatsSegment*>(mapped);
  segment->start_time_ticks.store(segment->start_time_ticks.load() - 1);
  munmap(mapped, sizeof(StatsSegment));
  EXPECT_EQ(read_stats_file(own_file()).state, StatsState::kStale);
  EXPECT_FALSE(process_is_running(static_cast<uint64_t>(getpid()), 1));
  EXPECT_TRUE(process_is_running(static_cast<uint64_t>(getpid()), 0));
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
