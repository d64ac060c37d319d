#include "util/cgroup_memory.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>

namespace vramspill {
namespace {

// A v1 group without a limit reads as the largest page count times the page size: about 2^63
// bytes, rounded down to a page size that differs between machines. No real limit comes near
// 2^62 bytes.
constexpr uint64_t kNoLimitFrom = uint64_t{1} << 62;

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

// The whole of a small proc or cgroup file; nullopt when it cannot be read. (stdio, as in
// host_memory.cpp: this runs inside the shim's initialisation.)
std::optional<std::string> read_file(const std::string& path) {
  const std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "re"));
  if (!file) return std::nullopt;
  std::string text;
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, got);
  if (std::ferror(file.get()) != 0) return std::nullopt;
  return text;
}

// Calls `visit` with each line of `text`, without its newline.
template <typename Visit>
void for_each_line(std::string_view text, Visit visit) {
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    visit(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
}

// Whether the comma-separated `list` has `item` ("rw,memory" has "memory").
bool has_item(std::string_view list, std::string_view item) {
  while (!list.empty()) {
    const std::size_t end = std::min(list.find(','), list.size());
    if (list.substr(0, end) == item) return true;
    list.remove_prefix(std::min(end + 1, list.size()));
  }
  return false;
}

std::optional<uint64_t> parse_number(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::optional<uint64_t> read_number(const std::string& path) {
  const std::optional<std::string> text = read_file(path);
  return text ? parse_number(*text) : std::nullopt;
}

// A limit file: nullopt when it cannot be read or sets no limit ("max" on v2, about 2^63 on v1).
std::optional<uint64_t> read_limit(const std::string& path) {
  const std::optional<std::string> text = read_file(path);
  if (!text) return std::nullopt;
  const std::optional<uint64_t> limit = parse_number(*text);
  if (!limit || *limit >= kNoLimitFrom) return std::nullopt;
  return limit;
}

// The value of `key` in a memory.stat file ("inactive_file 69632"); zero when absent.
uint64_t stat_value(const std::string& path, std::string_view key) {
  const std::optional<std::string> stat = read_file(path);
  uint64_t value = 0;
  if (!stat) return value;
  for_each_line(*stat, [&](std::string_view line) {
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ')
      value = parse_number(line.substr(key.size() + 1)).value_or(0);
  });
  return value;
}

// limit - (usage - reclaimable), never below zero; nullopt when the group sets no such limit
// (Note [Memory a cgroup leaves]).
std::optional<uint64_t> counter_room(const std::string& limit_path, const std::string& usage_path,
                                     uint64_t reclaimable) {
  const std::optional<uint64_t> limit = read_limit(limit_path);
  if (!limit) return std::nullopt;
  const uint64_t usage = read_number(usage_path).value_or(0);
  const uint64_t charged = usage > reclaimable ? usage - reclaimable : 0;
  return charged >= *limit ? 0 : *limit - charged;
}

std::optional<uint64_t> smaller(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

bool is_octal(char c) { return c >= '0' && c <= '7'; }

// mountinfo writes a space, tab, newline or backslash in a path as \ and three octal digits.
std::string unescape(std::string_view field) {
  std::string path;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && field.size() - i > 3 && is_octal(field[i + 1]) &&
        is_octal(field[i + 2]) && is_octal(field[i + 3])) {
      path += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                (field[i + 3] - '0'));
      i += 3;
    } else {
      path += field[i];
    }
  }
  return path;
}

struct Mount {
  std::string root;   // the hierarchy's directory the mount shows
  std::string point;  // where it is mounted
};

// A mountinfo line: "36 35 98:0 <root> <mount point> <options> [optional fields...] - <fstype>
// <source> <super options>". nullopt unless it mounts the memory hierarchy of `v2` or v1.
std::optional<Mount> memory_mount(std::string_view line, bool v2) {
  std::vector<std::string_view> fields;
  for (std::size_t start = 0; start <= line.size();) {
    const std::size_t end = std::min(line.find(' ', start), line.size());
    fields.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  const auto separator = std::find(fields.begin(), fields.end(), "-");
  if (fields.size() < 5 || fields.end() - separator < 4) return std::nullopt;
  const std::string_view type = separator[1];
  const bool memory = v2 ? type == "cgroup2" : type == "cgroup" && has_item(separator[3], "memory");
  if (!memory) return std::nullopt;
  return Mount{unescape(fields[3]), unescape(fields[4])};
}

// `path` (a group, as /proc/self/cgroup names it) below `mount_root`: "" for the root itself;
// nullopt when the mount does not show that group.
std::optional<std::string_view> path_below(std::string_view path, std::string_view mount_root) {
  if (mount_root == "/") return path == "/" ? std::string_view() : path;
  if (path == mount_root) return std::string_view();
  if (path.starts_with(mount_root) && path[mount_root.size()] == '/')
    return path.substr(mount_root.size());
  return std::nullopt;
}

}  // namespace

// Note [Memory a cgroup leaves]
CgroupMemory CgroupMemory::locate(std::string_view root) {
  CgroupMemory located;
  const std::string prefix(root);
  const std::optional<std::string> membership = read_file(prefix + "/proc/self/cgroup");
  const std::optional<std::string> mounts = read_file(prefix + "/proc/self/mountinfo");
  if (!membership || !mounts) return located;

  // "<id>:<controllers>:<path>": v2's line is "0::<path>".
  std::optional<std::string_view> v1_path;
  std::optional<std::string_view> v2_path;
  for_each_line(*membership, [&](std::string_view line) {
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) return;
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (line.substr(0, first) == "0" && controllers.empty()) {
      v2_path = path;
    } else if (has_item(controllers, "memory")) {
      v1_path = path;
    }
  });

  // A v1 memory controller is the one in charge where a process has both (a hybrid system).
  for (const bool v2 : {false, true}) {
    const std::optional<std::string_view> group_path = v2 ? v2_path : v1_path;
    if (!group_path) continue;
    std::optional<std::string> directory;
    std::string top;
    for_each_line(*mounts, [&](std::string_view line) {
      if (directory) return;
      const std::optional<Mount> mount = memory_mount(line, v2);
      if (!mount) return;
      const std::optional<std::string_view> below = path_below(*group_path, mount->root);
      if (!below) return;
      top = prefix + mount->point;
      directory = top + std::string(*below);
    });
    if (!directory) continue;
    located.version_ = v2 ? Version::kV2 : Version::kV1;
    for (std::string group = *directory;; group.resize(group.rfind('/'))) {
      located.groups_.push_back(group);
      if (group.size() <= top.size()) break;
    }
    return located;
  }
  return located;
}

std::optional<uint64_t> CgroupMemory::room() const {
  std::optional<uint64_t> least;
  for (const std::string& group : groups_) least = smaller(least, group_room(group));
  return least;
}

std::optional<uint64_t> CgroupMemory::group_room(const std::string& directory) const {
  if (version_ == Version::kV2) {
    return counter_room(directory + "/memory.max", directory + "/memory.current",
                        stat_value(directory + "/memory.stat", "inactive_file"));
  }
  const uint64_t reclaimable = stat_value(directory + "/memory.stat", "total_inactive_file");
  return smaller(counter_room(directory + "/memory.limit_in_bytes",
                              directory + "/memory.usage_in_bytes", reclaimable),
                 counter_room(directory + "/memory.memsw.limit_in_bytes",
                              directory + "/memory.memsw.usage_in_bytes", reclaimable));
}

}  // namespace vramspill
