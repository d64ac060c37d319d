// How much memory this process's memory cgroups leave it (cgroup v2 or v1), for [spill]
// host_limit given as a percent: inside a container the cgroup's limit, not the host's
// MemAvailable, is what the kernel's OOM killer enforces.
//
// Note [Memory a cgroup leaves]
// The process's group is its line in /proc/self/cgroup: "0::<path>" on cgroup v2, or a v1 line
// whose controllers include "memory". That path is relative to the hierarchy's root; the
// hierarchy is mounted where /proc/self/mountinfo says (fstype "cgroup2", or "cgroup" with the
// "memory" super option), and a mount shows the subtree below its own root (a container sees its
// own group as the mount point). So the group's directory is the mount point plus the path below
// the mount's root, and its ancestors up to the mount point limit it too: a child group without a
// limit inside a limited parent takes from the parent's room. Each group leaves
//     room = limit - (usage - inactive_file)
// v2: limit = memory.max ("max": none), usage = memory.current;
// v1: limit = memory.limit_in_bytes (no limit reads as about 2^63 rounded to pages), usage =
//     memory.usage_in_bytes; and the same for memory.memsw.* (memory plus swap) where swap
//     accounting is on: a new page is charged to both counters, and swapping a page out moves it
//     between them without freeing any memsw, so memsw's room bounds new memory too once the
//     group's swap allowance is used up.
// inactive_file (v2 memory.stat, v1 total_inactive_file; both count the whole subtree) is page
// cache the kernel drops before it ever OOM-kills: without it, a job that has read a large dataset
// would look out of memory while most of its usage is cache (the kubelet counts a container's
// "working set" the same way). The process's room is the smallest over its groups; groups without
// a limit do not count. A group whose limit cannot be read does not count either; one whose usage
// cannot be read counts as empty (its limit still bounds the room). v2's memory.high throttles but
// never OOM-kills, so it is not a limit here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramspill {

class CgroupMemory {
 public:
  // This process's memory cgroup and its ancestors up to the hierarchy's mount point, found in
  // <root>/proc/self/cgroup and <root>/proc/self/mountinfo; `root` prefixes every path read ("" on
  // a real system, a fake tree in tests). No groups when there is no memory cgroup mounted.
  static CgroupMemory locate(std::string_view root);

  // The least room any limited group leaves for new memory, read now; nullopt when no group has a
  // limit that can be read (or there are no groups).
  std::optional<uint64_t> room() const;

  // The groups' directories, innermost first (for the log and the tests).
  const std::vector<std::string>& groups() const { return groups_; }

 private:
  enum class Version : uint8_t { kV1, kV2 };

  std::optional<uint64_t> group_room(const std::string& directory) const;

  std::vector<std::string> groups_;
  Version version_ = Version::kV2;
};

}  // namespace vramspill
