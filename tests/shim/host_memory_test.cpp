// What a percent host limit is a percent of (util/host_memory.h, util/cgroup_memory.h), read from
// fake /proc and /sys trees: cgroup v2 and v1, nested groups, groups without a limit, no cgroup
// mount, unreadable files, and MemAvailable against the cgroups' room.
#include "util/host_memory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/cgroup_memory.h"

namespace vramspill {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// What v1 reads for "no limit" with 4 KiB and with 64 KiB pages.
constexpr const char* kV1Unlimited = "9223372036854771712\n";
constexpr const char* kV1Unlimited64K = "9223372036854710272\n";

std::string mib(uint64_t count) { return std::to_string(count * kMiB) + "\n"; }

// A directory that stands for "/": tests write the proc and cgroup files they need into it.
class FakeRoot {
 public:
  FakeRoot() {
    std::string pattern = (std::filesystem::temp_directory_path() / "vramspill-root-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~FakeRoot() { std::filesystem::remove_all(path_); }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;

  const std::string& path() const { return path_; }

  void write(const std::string& file, const std::string& text) const {
    const std::filesystem::path full = path_ + file;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full) << text;
  }
  void make_directory(const std::string& directory) const {
    std::filesystem::create_directories(path_ + directory);
  }

  void meminfo(uint64_t available_mib) const {
    write("/proc/meminfo",
          "MemTotal:       65536000 kB\nMemFree:         1000000 kB\n"
          "MemAvailable:   " +
              std::to_string(available_mib * 1024) + " kB\n");
  }

  // cgroup v2 mounted at /sys/fs/cgroup, the process in `group`.
  void v2(const std::string& group) const {
    write("/proc/self/cgroup", "0::" + group + "\n");
    write("/proc/self/mountinfo",
          "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n"
          "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 "
          "cgroup2 rw,nsdelegate,memory_recursiveprot\n");
  }

  // A hybrid system: v1 controllers (memory among them) and an empty v2 hierarchy; the process
  // in `group` of the memory controller.
  void v1(const std::string& group) const {
    write("/proc/self/cgroup", "9:name=systemd:/\n4:memory:" + group + "\n2:cpu,cpuacct:/\n0::/\n");
    write("/proc/self/mountinfo",
          "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n"
          "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
          "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
          "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  }

  std::vector<std::string> under_root(const std::vector<std::string>& paths) const {
    std::vector<std::string> full;
    for (const std::string& p : paths) full.push_back(path_ + p);
    return full;
  }

 private:
  std::string path_;
};

TEST(CgroupMemory, V2ChildWithoutALimitTakesFromItsLimitedParent) {
  FakeRoot root;
  root.v2("/job/step");
  root.write("/sys/fs/cgroup/job/step/memory.max", "max\n");
  root.write("/sys/fs/cgroup/job/step/memory.current", mib(50));
  root.write("/sys/fs/cgroup/job/memory.max", mib(1024));
  root.write("/sys/fs/cgroup/job/memory.current", mib(300));
  // 100 MiB of the parent's usage is page cache the kernel drops first.
  root.write("/sys/fs/cgroup/job/memory.stat",
             "anon 209715200\nfile 104857600\n"
             "inactive_file 104857600\nactive_file 0\n");
  root.write("/sys/fs/cgroup/memory.current", mib(9000));  // the root group has no memory.max

  const CgroupMemory cgroups = CgroupMemory::locate(root.path());
  EXPECT_EQ(cgroups.groups(),
            root.under_root({"/sys/fs/cgroup/job/step", "/sys/fs/cgroup/job", "/sys/fs/cgroup"}));
  EXPECT_EQ(cgroups.room(), (1024 - 300 + 100) * kMiB);
}

TEST(CgroupMemory, V2TheTightestGroupWins) {
  FakeRoot root;
  root.v2("/job/step");
  root.write("/sys/fs/cgroup/job/step/memory.max", mib(200));
  root.write("/sys/fs/cgroup/job/step/memory.current", mib(50));
  root.write("/sys/fs/cgroup/job/memory.max", mib(1024));
  root.write("/sys/fs/cgroup/job/memory.current", mib(1000));
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), 24 * kMiB);

  root.write("/sys/fs/cgroup/job/memory.current", mib(500));
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), 150 * kMiB);
}

TEST(CgroupMemory, V2MaxIsNoLimit) {
  FakeRoot root;
  root.v2("/job");
  root.write("/sys/fs/cgroup/job/memory.max", "max\n");
  root.write("/sys/fs/cgroup/job/memory.current", mib(300));
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), std::nullopt);
}

TEST(CgroupMemory, V2UsageOverTheLimitLeavesNoRoom) {
  FakeRoot root;
  root.v2("/job");
  root.write("/sys/fs/cgroup/job/memory.max", mib(100));
  root.write("/sys/fs/cgroup/job/memory.current", mib(101));
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), 0u);
}

TEST(CgroupMemory, V1HierarchyIsWalkedAndMemswCounts) {
  FakeRoot root;
  root.v1("/batch/job");
  const std::string job = "/sys/fs/cgroup/memory/batch/job";
  const std::string batch = "/sys/fs/cgroup/memory/batch";
  root.write(job + "/memory.limit_in_bytes", kV1Unlimited);
  root.write(job + "/memory.usage_in_bytes", mib(100));
  root.write(batch + "/memory.limit_in_bytes", mib(512));
  root.write(batch + "/memory.usage_in_bytes", mib(200));
  root.write(batch + "/memory.stat", "cache 0\ninactive_file 0\ntotal_inactive_file 20971520\n");
  root.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", kV1Unlimited);

  const CgroupMemory cgroups = CgroupMemory::locate(root.path());
  EXPECT_EQ(cgroups.groups(), root.under_root({job, batch, "/sys/fs/cgroup/memory"}));
  EXPECT_EQ(cgroups.room(), (512 - 200 + 20) * kMiB);

  // The group's swap allowance used up: memory plus swap leaves less than memory alone.
  root.write(batch + "/memory.memsw.limit_in_bytes", mib(600));
  root.write(batch + "/memory.memsw.usage_in_bytes", mib(550));
  EXPECT_EQ(cgroups.room(), (600 - 550 + 20) * kMiB);
}

TEST(CgroupMemory, V1UnlimitedIsNoLimit) {
  FakeRoot root;
  root.v1("/job");
  root.write("/sys/fs/cgroup/memory/job/memory.limit_in_bytes", kV1Unlimited);
  root.write("/sys/fs/cgroup/memory/job/memory.usage_in_bytes", mib(100));
  root.write("/sys/fs/cgroup/memory/job/memory.memsw.limit_in_bytes", kV1Unlimited64K);
  root.write("/sys/fs/cgroup/memory/job/memory.memsw.usage_in_bytes", mib(100));
  root.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", kV1Unlimited64K);
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), std::nullopt);
}

// A container sees its own group as the mount's root; a group the mount does not show is none.
TEST(CgroupMemory, AContainersMountShowsItsOwnGroup) {
  FakeRoot root;
  root.write("/proc/self/cgroup", "4:memory:/docker/abc\n");
  root.write("/proc/self/mountinfo",
             "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n");
  root.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", mib(256));
  root.write("/sys/fs/cgroup/memory/memory.usage_in_bytes", mib(56));
  const CgroupMemory cgroups = CgroupMemory::locate(root.path());
  EXPECT_EQ(cgroups.groups(), root.under_root({"/sys/fs/cgroup/memory"}));
  EXPECT_EQ(cgroups.room(), 200 * kMiB);

  root.write("/proc/self/cgroup", "4:memory:/docker/other\n");
  EXPECT_TRUE(CgroupMemory::locate(root.path()).groups().empty());
}

TEST(CgroupMemory, EscapedMountPointsAreDecoded) {
  FakeRoot root;
  root.write("/proc/self/cgroup", "0::/job\n");
  root.write("/proc/self/mountinfo", "30 22 0:26 / /my\\040cgroups rw - cgroup2 cgroup2 rw\n");
  root.write("/my cgroups/job/memory.max", mib(64));
  root.write("/my cgroups/job/memory.current", mib(4));
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), 60 * kMiB);
}

TEST(CgroupMemory, NoCgroupMountMeansNoGroups) {
  FakeRoot root;
  root.write("/proc/self/cgroup", "0::/job\n");
  root.write("/proc/self/mountinfo", "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n");
  root.write("/sys/fs/cgroup/job/memory.max", mib(64));
  const CgroupMemory cgroups = CgroupMemory::locate(root.path());
  EXPECT_TRUE(cgroups.groups().empty());
  EXPECT_EQ(cgroups.room(), std::nullopt);

  FakeRoot no_proc;
  EXPECT_TRUE(CgroupMemory::locate(no_proc.path()).groups().empty());
}

TEST(CgroupMemory, UnreadableFilesCountAsNoLimitOrNoUsage) {
  FakeRoot root;
  root.v2("/job/step");
  // A limit that cannot be read (a directory in its place) or parsed says nothing.
  root.make_directory("/sys/fs/cgroup/job/step/memory.max");
  root.write("/sys/fs/cgroup/job/memory.max", "lots\n");
  root.write("/sys/fs/cgroup/job/memory.current", mib(10));
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), std::nullopt);

  // A limit without a readable usage still bounds the room; an unreadable memory.stat counts no
  // page cache.
  root.write("/sys/fs/cgroup/job/memory.max", mib(64));
  std::filesystem::remove(root.path() + "/sys/fs/cgroup/job/memory.current");
  root.make_directory("/sys/fs/cgroup/job/memory.stat");
  EXPECT_EQ(CgroupMemory::locate(root.path()).room(), 64 * kMiB);
}

TEST(AvailableMemory, MemAvailableSmallerThanTheCgroupsRoom) {
  FakeRoot root;
  root.meminfo(100);
  root.v2("/job");
  root.write("/sys/fs/cgroup/job/memory.max", mib(1024));
  root.write("/sys/fs/cgroup/job/memory.current", mib(24));
  const std::optional<MemoryRoom> room = AvailableMemory(root.path()).now();
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, 100 * kMiB);
  EXPECT_FALSE(room->cgroup_bound);
}

TEST(AvailableMemory, TheCgroupsRoomSmallerThanMemAvailable) {
  FakeRoot root;
  root.meminfo(20000);
  root.v1("/job");
  root.write("/sys/fs/cgroup/memory/job/memory.limit_in_bytes", mib(2048));
  root.write("/sys/fs/cgroup/memory/job/memory.usage_in_bytes", mib(48));
  const AvailableMemory available(root.path());
  std::optional<MemoryRoom> room = available.now();
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, 2000 * kMiB);
  EXPECT_TRUE(room->cgroup_bound);

  // Read again each time: the job's usage grows.
  root.write("/sys/fs/cgroup/memory/job/memory.usage_in_bytes", mib(1048));
  room = available.now();
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, 1000 * kMiB);
}

TEST(AvailableMemory, WithoutACgroupLimitItIsMemAvailable) {
  FakeRoot root;
  root.meminfo(300);
  root.v2("/job");
  root.write("/sys/fs/cgroup/job/memory.max", "max\n");
  const std::optional<MemoryRoom> room = AvailableMemory(root.path()).now();
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, 300 * kMiB);
  EXPECT_FALSE(room->cgroup_bound);
}

TEST(AvailableMemory, OneFigureIsEnoughAndNoneIsNothing) {
  FakeRoot root;
  root.v2("/job");
  root.write("/sys/fs/cgroup/job/memory.max", mib(64));
  root.write("/sys/fs/cgroup/job/memory.current", mib(0));
  const std::optional<MemoryRoom> room = AvailableMemory(root.path()).now();  // no meminfo
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, 64 * kMiB);
  EXPECT_TRUE(room->cgroup_bound);

  FakeRoot empty;
  EXPECT_EQ(AvailableMemory(empty.path()).now(), std::nullopt);
}

}  // namespace
}  // namespace vramspill
