// SIMCUDA_STATS: runs stats_program.cpp (a driver-API program with known traffic) with the
// variable set, then parses the JSON it left behind with a strict parser and checks the counters
// and the modeled stream times against what the cost model must charge.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef SIMCUDA_STATS_PROGRAM
#error "SIMCUDA_STATS_PROGRAM must name the stats_program executable"
#endif

namespace {

// --- A strict JSON parser (RFC 8259), enough to validate and read the statistics -------------

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject } type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;  // a string's value, or a number as written (integers compare exactly)
  std::vector<Json> elements;
  std::map<std::string, Json> members;

  const Json& operator[](const std::string& key) const {
    const auto it = members.find(key);
    if (type != Type::kObject || it == members.end()) throw std::runtime_error("no key " + key);
    return it->second;
  }
  uint64_t integer() const {
    if (type != Type::kNumber || text.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error("not an unsigned integer: " + text);
    return std::stoull(text);
  }
};

class Parser {
 public:
  explicit Parser(std::string input) : in_(std::move(input)) {}
  Json document() {
    Json value = parse_value();
    skip_space();
    if (at_ != in_.size()) fail("trailing characters");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what + " at offset " + std::to_string(at_));
  }
  void skip_space() {
    while (at_ < in_.size() && std::string_view(" \t\r\n").find(in_[at_]) != std::string::npos)
      ++at_;
  }
  char peek() {
    skip_space();
    if (at_ >= in_.size()) fail("unexpected end");
    return in_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected ") + c);
    ++at_;
  }
  bool literal(std::string_view word) {
    if (in_.compare(at_, word.size(), word) != 0) return false;
    at_ += word.size();
    return true;
  }
  Json parse_value() {
    Json value;
    const char c = peek();
    if (c == '{') {
      value.type = Json::Type::kObject;
      ++at_;
      if (peek() == '}') return ++at_, value;
      do {
        std::string key = parse_string();
        expect(':');
        if (!value.members.emplace(key, parse_value()).second) fail("duplicate key " + key);
      } while (peek() == ',' && ++at_);
      expect('}');
    } else if (c == '[') {
      value.type = Json::Type::kArray;
      ++at_;
      if (peek() == ']') return ++at_, value;
      do value.elements.push_back(parse_value());
      while (peek() == ',' && ++at_);
      expect(']');
    } else if (c == '"') {
      value.type = Json::Type::kString;
      value.text = parse_string();
    } else if (literal("true")) {
      value.type = Json::Type::kBool;
      value.boolean = true;
    } else if (literal("false")) {
      value.type = Json::Type::kBool;
    } else if (literal("null")) {
      value.type = Json::Type::kNull;
    } else {
      value.type = Json::Type::kNumber;
      const size_t start = at_;
      if (in_[at_] == '-') ++at_;
      if (!digits()) fail("bad number");
      if (in_[start + (in_[start] == '-')] == '0' && at_ - start > 1u + (in_[start] == '-'))
        fail("leading zero");
      if (at_ < in_.size() && in_[at_] == '.' && (++at_, !digits())) fail("bad fraction");
      if (at_ < in_.size() && (in_[at_] == 'e' || in_[at_] == 'E')) {
        ++at_;
        if (at_ < in_.size() && (in_[at_] == '+' || in_[at_] == '-')) ++at_;
        if (!digits()) fail("bad exponent");
      }
      value.text = in_.substr(start, at_ - start);
      value.number = std::strtod(value.text.c_str(), nullptr);
    }
    return value;
  }
  bool digits() {
    const size_t start = at_;
    while (at_ < in_.size() && in_[at_] >= '0' && in_[at_] <= '9') ++at_;
    return at_ > start;
  }
  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= in_.size()) fail("unterminated string");
      const char c = in_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= in_.size()) fail("unterminated escape");
      const char e = in_[at_++];
      const std::string_view simple = "\"\\/bfnrt", meaning = "\"\\/\b\f\n\r\t";
      if (const size_t i = simple.find(e); i != std::string_view::npos) {
        out += meaning[i];
      } else if (e == 'u' && at_ + 4 <= in_.size() &&
                 in_.substr(at_, 4).find_first_not_of("0123456789abcdefABCDEF") ==
                     std::string::npos) {
        out += '?';  // the value does not matter here, only that the escape is valid
        at_ += 4;
      } else {
        fail("bad escape");
      }
    }
  }

  std::string in_;
  size_t at_ = 0;
};

// --- Running the program ----------------------------------------------------------------------

struct Outcome {
  int exit_code = -1;
  bool file_written = false;
  std::string file;
};

Outcome run_program(const std::string& stats_path, const std::vector<std::string>& arguments,
                    const std::map<std::string, std::string>& environment) {
  std::remove(stats_path.c_str());
  const pid_t child = fork();
  if (child == 0) {  // the test process has no threads yet, so setenv is fine here
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    setenv("SIMCUDA_STATS", stats_path.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(SIMCUDA_STATS_PROGRAM)};
    for (const std::string& argument : arguments)
      argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    execv(SIMCUDA_STATS_PROGRAM, argv.data());
    _exit(127);
  }
  Outcome outcome;
  int status = 0;
  if (child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status))
    outcome.exit_code = WEXITSTATUS(status);
  std::ifstream file(stats_path);
  outcome.file_written = file.good();
  std::stringstream contents;
  contents << file.rdbuf();
  outcome.file = contents.str();
  std::remove(stats_path.c_str());
  return outcome;
}

std::string temporary_path(const char* name) {
  return ::testing::TempDir() + "simcuda_" + name + "_" + std::to_string(getpid()) + ".json";
}

TEST(StatsTest, CountersAndModeledTimesMatchTheWorkDone) {
  constexpr uint64_t kCopyBytes = (uint64_t{3} << 20) + 5;  // not a whole number of pages
  constexpr uint64_t kFillCount = uint64_t{1} << 18;
  constexpr double kHbm = 1e12, kLink = 1e9, kLaunch = 3e-6;
  const Outcome outcome = run_program(
      temporary_path("stats"), {std::to_string(kCopyBytes), std::to_string(kFillCount)},
      {{"SIMCUDA_HBM_BW", "1e12"}, {"SIMCUDA_LINK_BW", "1e9"}, {"SIMCUDA_VRAM", "1GiB"}});
  ASSERT_EQ(outcome.exit_code, 0);
  ASSERT_TRUE(outcome.file_written);
  Json stats;
  ASSERT_NO_THROW(stats = Parser(outcome.file).document()) << outcome.file;

  EXPECT_EQ(stats["simcuda_stats_version"].integer(), 2u);
  EXPECT_TRUE(stats["modeled"].boolean);
  EXPECT_NE(stats["note"].text.find("modeled"), std::string::npos);
  EXPECT_EQ(stats["cost_model"]["hbm_bytes_per_second"].number, kHbm);
  EXPECT_EQ(stats["cost_model"]["link_bytes_per_second"].number, kLink);

  ASSERT_EQ(stats["devices"].elements.size(), 1u);
  const Json& device = stats["devices"].elements[0];
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t kept = (kCopyBytes + page - 1) / page * page;
  EXPECT_EQ(device["ordinal"].integer(), 0u);
  EXPECT_EQ(device["total_bytes"].integer(), uint64_t{1} << 30);
  EXPECT_EQ(device["used_bytes"].integer(), kept);
  EXPECT_GE(device["peak_device_bytes"].integer(), kept + kFillCount * 4);
  EXPECT_EQ(device["kernel_launches"].integer(), 2u);
  // vs_copy read the pinned source over the link and wrote device memory; vs_fill_u32 wrote
  // device memory only. No copies, no managed memory.
  EXPECT_EQ(device["link_bytes_zero_copy"].integer(), kCopyBytes);
  EXPECT_EQ(device["device_bytes_touched"].integer(), kCopyBytes + kFillCount * 4);
  EXPECT_EQ(device["link_bytes_copies"].integer(), 0u);
  EXPECT_EQ(device["link_bytes_migrations"].integer(), 0u);
  EXPECT_EQ(device["managed_faults"].integer(), 0u);
  EXPECT_EQ(device["managed_evictions"].integer(), 0u);

  std::map<std::string, double> seconds_by_kind;
  uint64_t previous_id = 0;
  for (const Json& stream : device["streams"].elements) {
    EXPECT_GT(stream["id"].integer(), previous_id) << "streams are ordered by id";
    previous_id = stream["id"].integer();
    seconds_by_kind[stream["kind"].text] += stream["modeled_seconds"].number;
  }
  const double copy_seconds = kLaunch + kCopyBytes / kLink + kCopyBytes / kHbm;
  const double fill_seconds = kLaunch + kFillCount * 4 / kHbm;
  // The host's own time in driver calls (Note [Host call costs] in
  // tools/simcuda/src/core/host_call_cost.h): cuMemAlloc and cuMemFree 38.5 us a call, a
  // launch 3.7 us. The two cuMemAllocs come before the copy is queued, the copy's launch before
  // the fill's.
  constexpr double kAllocOrFree = 38.5e-6, kLaunchCall = 3.7e-6;
  const double copy_start = 2 * kAllocOrFree;
  const double fill_start = copy_start + kLaunchCall;
  const double copy_end = copy_start + copy_seconds, fill_end = fill_start + fill_seconds;
  ASSERT_EQ(seconds_by_kind.count("legacy_default"), 1u);
  ASSERT_EQ(seconds_by_kind.count("created"), 1u);  // destroyed, but its work happened
  EXPECT_NEAR(seconds_by_kind["legacy_default"], copy_end, copy_end * 1e-9);
  EXPECT_NEAR(seconds_by_kind["created"], fill_end, fill_end * 1e-9);
  // cuCtxSynchronize waited for both streams: the host's clock reached the later one's end; the
  // cuMemFree of the 1 MiB buffer then took one free's time.
  const double host_end = std::max(copy_end, fill_end) + kAllocOrFree;
  EXPECT_NEAR(stats["host_modeled_seconds"].number, host_end, host_end * 1e-9);
  EXPECT_EQ(stats["remap_violations"].integer(), 0u);
}

TEST(StatsTest, AnUnwritablePathIsReportedWithoutFailingTheProgram) {
  const Outcome outcome = run_program("/nonexistent-directory/stats.json", {"4096", "16"}, {});
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_FALSE(outcome.file_written);
}

// The statistics are written while a kernel still runs on a stream worker: no crash, valid JSON.
TEST(StatsTest, ExitingWhileKernelsRunStillWritesTheStatistics) {
  const Outcome outcome = run_program(
      temporary_path("running"), {"4096", std::to_string(uint64_t{64} << 20), "exit-while-running"},
      {{"SIMCUDA_VRAM", "2GiB"}});
  ASSERT_EQ(outcome.exit_code, 0);
  ASSERT_TRUE(outcome.file_written);
  Json stats;
  ASSERT_NO_THROW(stats = Parser(outcome.file).document()) << outcome.file;
  // Launches are counted as they run: zero, one or both may have run by then.
  EXPECT_LE(stats["devices"].elements.at(0)["kernel_launches"].integer(), 2u);
}

TEST(StatsParserTest, RejectsInvalidJson) {
  for (const char* bad : {"{", "{\"a\":1,}", "[01]", "{\"a\" 1}", "\"\x01\"", "[1] 2", "nul"})
    EXPECT_THROW(Parser(bad).document(), std::runtime_error) << bad;
  EXPECT_EQ(Parser("{\"a\": [1, 2.5e3, true, null, \"x\\n\"]}").document()["a"].elements.size(),
            5u);
}

}  // namespace
