// libFuzzer target: the policy file (the TOML named by VRAMSPILL_CONFIG), read by load_config()
// exactly as the shim reads it. The input is the file's text. Besides "no crash, no leak, no
// undefined behaviour, no exception" (load_config() is noexcept: one would abort), it checks:
//  - every problem is one printable line naming its place as <file>:<line>:<column>, with the
//    line and column inside the text;
//  - a policy that loads gives a Config the shim can use (fuzz_checks.h);
//  - the environment beats the file: variables set on top of a policy that loads replace the
//    file's values for their keys and leave every other key as the file set it.
//
// The text goes into a memfd that VRAMSPILL_CONFIG names as /proc/self/fd/<n>: the real path
// through load_config(), with no file on disk and no setenv().
#include <sys/mman.h>
#include <unistd.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "fuzz_checks.h"

namespace vramspill::fuzz {
namespace {

// The memfd holding the current input, created once.
class PolicyFile {
 public:
  PolicyFile() : fd_(memfd_create("policy.toml", MFD_CLOEXEC)) {
    require(fd_ >= 0, "memfd_create works");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }

  void write(std::string_view text) const {
    require(ftruncate(fd_, 0) == 0, "the memfd can be emptied");
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t wrote =
          pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
      require(wrote > 0, "the memfd can be written");
      done += static_cast<std::size_t>(wrote);
    }
  }

  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// Reads the digits at `text`[at...]; advances `at` past them. 0 when there are none.
std::size_t read_number(std::string_view text, std::size_t& at) {
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text.data() + at, text.data() + text.size(), value);
  if (error != std::errc{}) return 0;
  at = static_cast<std::size_t>(end - text.data());
  return value;
}

// Each problem names at least one place, and every place it names is inside `text`: a line
// that exists, and a column at most two past that line's last byte (toml++ counts columns in
// code points, never more than the bytes). Two, not one: toml++ places the end of the file one
// column after the last character it read, which may be the line's newline ("a = [1," is 7
// bytes and its error is at 1:9).
//
// A problem also echoes the input (a bad value, an unknown key), and the input may hold the
// file's name itself ("32G/proc/self/fd/3:iB" did), so finding the name in a problem does not
// make it a place. `other` is the same text loaded under a second name of the same length: the
// problems are the same byte for byte but for the places, so a place is where `error` names
// `path` and `other` names `other_path` at the same offset; an echo is the same in both.
void check_places(const ConfigError& error, const std::string& path, const ConfigError& other,
                  const std::string& other_path, std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  require(other.problems.size() == error.problems.size(),
          "the problems do not depend on the file's name", error.message);
  const std::string prefix = path + ":";
  const std::string other_prefix = other_path + ":";
  for (std::size_t i = 0; i < error.problems.size(); ++i) {
    const std::string& problem = error.problems[i];
    const std::string& other_problem = other.problems[i];
    require(other_problem.size() == problem.size(), "the problems do not depend on the file's name",
            problem);
    std::size_t places = 0;
    for (std::size_t at = problem.find(prefix); at != std::string::npos;
         at = problem.find(prefix, at + 1)) {
      if (other_problem.compare(at, other_prefix.size(), other_prefix) != 0) continue;  // an echo
      std::size_t cursor = at + prefix.size();
      const std::size_t line = read_number(problem, cursor);
      require(cursor < problem.size() && problem[cursor] == ':',
              "a place is <file>:<line>:<column>", problem);
      ++cursor;
      const std::size_t column = read_number(problem, cursor);
      require(line >= 1 && line <= lines.size(), "a place's line is in the file", problem);
      require(column >= 1 && column <= lines[line - 1].size() + 2,
              "a place's column is in its line", problem);
      ++places;
    }
    require(places > 0, "every problem names its place in the file", problem);
  }
}

// Environment beats file: these replace whatever the file says for their keys.
const std::vector<std::string>& overrides() {
  static const std::vector<std::string> kOverrides = {
      "VRAMSPILL_DEVICE_BUDGET=3GiB", "VRAMSPILL_DEVICE_RESERVE=1MiB", "VRAMSPILL_SPILL_MODE=host",
      "VRAMSPILL_LOG_LEVEL=debug"};
  return kOverrides;
}

void check_environment_beats_file(const Config& from_file, const std::string& path) {
  std::vector<std::string> environment = overrides();
  environment.push_back("VRAMSPILL_CONFIG=" + path);
  const ConfigResult result = load_with(environment);
  require(result.ok(), "a policy that loads still loads with valid overrides",
          result.ok() ? "" : result.error().message);
  const Config& config = result.config();
  require(config.device.budget == Budget::bytes(3ull << 30) &&
              config.device.reserve_bytes == (1u << 20) && config.spill.mode == SpillMode::kHost &&
              config.log.level == LogLevel::kDebug,
          "the environment's values beat the file's");
  const SpillConfig& spill = config.spill;
  const SpillConfig& file_spill = from_file.spill;
  require(spill.min_size == file_spill.min_size && spill.host_limit == file_spill.host_limit &&
              spill.managed_location == file_spill.managed_location &&
              spill.managed_accessed_by == file_spill.managed_accessed_by &&
              spill.host_pool_step == file_spill.host_pool_step &&
              spill.host_pool_keep == file_spill.host_pool_keep &&
              config.report.memory_info == from_file.report.memory_info &&
              config.log.file == from_file.log.file &&
              config.log.summary == from_file.log.summary &&
              config.log.stats == from_file.log.stats && config.source_file == path,
          "keys the environment does not set keep the file's values");
}

}  // namespace
}  // namespace vramspill::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace vramspill::fuzz;
  // Two names of one length for the same text: see check_places().
  static const PolicyFile file;
  static const PolicyFile twin;
  require(twin.path().size() == file.path().size() && twin.path() != file.path(),
          "the two memfds' names differ but have one length", twin.path());
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  file.write(text);
  const vramspill::ConfigResult result = load_with({"VRAMSPILL_CONFIG=" + file.path()});
  if (!result.ok()) {
    check_error_lines(result.error());
    twin.write(text);
    const vramspill::ConfigResult twin_result = load_with({"VRAMSPILL_CONFIG=" + twin.path()});
    require(!twin_result.ok(), "whether a policy loads does not depend on the file's name");
    check_places(result.error(), file.path(), twin_result.error(), twin.path(), text);
    return 0;
  }
  check_config_usable(result.config());
  require(result.config().source_file == file.path(), "the config names the file it came from");
  check_environment_beats_file(result.config(), file.path());
  return 0;
}
