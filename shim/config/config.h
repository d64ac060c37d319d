// The shim's configuration as typed values, and load_config(), which reads it from the TOML file
// named by VRAMSPILL_CONFIG and the VRAMSPILL_* environment variables.
//
// Every option, its default and its documentation live in one table (config/options.h); this
// header only holds the typed result. Members below therefore have no meaningful initialisers:
// get a Config from load_config() or default_config(), which fill it from the table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace vramspill {

// A memory amount given either in bytes or as a fraction of a total: the device's memory for
// [device] budget, the host's available memory for [spill] host_limit. The fraction stays a
// fraction until the total is known (the config is read before the driver is asked anything),
// then resolve() turns it into bytes.
class Budget {
 public:
  Budget() = default;  // zero bytes; a placeholder until the table's default is stored
  static Budget bytes(uint64_t bytes) { return Budget(bytes, 0.0, false); }
  // 0 < fraction <= 1; "45%" is fraction(0.45).
  static Budget fraction(double fraction) { return Budget(0, fraction, true); }

  bool is_fraction() const { return is_fraction_; }
  uint64_t byte_count() const { return bytes_; }          // meaningful when !is_fraction()
  double fraction_of_total() const { return fraction_; }  // meaningful when is_fraction()

  // Bytes this budget allows out of `total` bytes; never more than `total`.
  uint64_t resolve(uint64_t total) const;

  bool operator==(const Budget&) const = default;

 private:
  Budget(uint64_t bytes, double fraction, bool is_fraction)
      : bytes_(bytes), fraction_(fraction), is_fraction_(is_fraction) {}

  uint64_t bytes_ = 0;
  double fraction_ = 0.0;
  bool is_fraction_ = false;
};

// Enum options: the names are the TOML/env spellings, indexed by the enum's value; the options
// table takes its list of valid choices from these arrays, so the two cannot drift apart.
// Where an allocation over the limit goes (shim/README.md, "Placement modes").
enum class SpillMode : uint8_t { kOff, kManaged, kHost, kAuto, kTiered };
inline constexpr std::array<std::string_view, 5> kSpillModeNames = {"off", "managed", "host",
                                                                    "auto", "tiered"};

// The eviction policies [tiered] policy may name: policies/registry.h's names, which a test
// holds this list to (the config layer cannot reach the registry).
inline constexpr std::array<std::string_view, 5> kTieredPolicyNames = {"fifo", "largest",
                                                                       "learned", "lfu", "lru"};

// How tiered mode keeps queued work off the granules it remaps (shim/README.md, "Tiered mode"):
// `safe` waits for all the device's work, `tracked` only for the streams that used the blocks
// that move (Note [The tracked window] in placement/tracked_work.h).
enum class WindowMode : uint8_t { kSafe, kTracked };
inline constexpr std::array<std::string_view, 2> kWindowModeNames = {"safe", "tracked"};

// Where tiered mode serves stream-ordered requests (Note [Stream-ordered requests in the arena] in
// placement/stream_ordered_blocks.h): `arena` makes them tiered blocks, `pool` leaves them to the
// driver's pools, which get room from the arena (Note [Stream-ordered requests in tiered mode]).
enum class StreamOrderedMode : uint8_t { kArena, kPool };
inline constexpr std::array<std::string_view, 2> kStreamOrderedModeNames = {"arena", "pool"};

// What carries out tiered mode's moves (shim/README.md, "Tiered mode"): `remap` moves a block's
// 2 MiB granules between device- and host-located VMM memory at the same address (the granule
// arena), `prefetch` makes each block one managed allocation and moves it with the driver's
// prefetches (Note [The prefetch mover] in placement/prefetch_placement.h).
enum class TieredMover : uint8_t { kRemap, kPrefetch };
inline constexpr std::array<std::string_view, 2> kTieredMoverNames = {"remap", "prefetch"};

// Which promotions the prefetch mover makes when they would evict (Note [Admitting a promotion]
// in placement/promotion_admission.h): `weighed`, those whose block's recent uses outweigh its
// victims' by the bytes the move crosses; `always`, every one the policy asks for.
enum class TieredAdmission : uint8_t { kWeighed, kAlways };
inline constexpr std::array<std::string_view, 2> kTieredAdmissionNames = {"weighed", "always"};

// The preferred location given to managed memory that holds a spilled allocation.
enum class ManagedLocation : uint8_t { kHost, kDevice, kNone };
inline constexpr std::array<std::string_view, 3> kManagedLocationNames = {"host", "device",
                                                                          "none"};

// What cuMemGetInfo reports under the shim.
enum class MemoryInfo : uint8_t { kBudget, kPhysical, kVirtual };
inline constexpr std::array<std::string_view, 3> kMemoryInfoNames = {"budget", "physical",
                                                                     "virtual"};

// How the [trace] file is written (telemetry/trace_format.h, telemetry/trace_binary_format.h).
enum class TraceFormat : uint8_t { kText, kBinary };
inline constexpr std::array<std::string_view, 2> kTraceFormatNames = {"text", "binary"};

enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kOff };
inline constexpr std::array<std::string_view, 6> kLogLevelNames = {"trace", "debug", "info",
                                                                   "warn",  "error", "off"};

struct DeviceConfig {
  Budget budget;
  uint64_t reserve_bytes{};

  // What the ledger enforces: min(budget, device_total) - reserve, never below zero.
  uint64_t limit(uint64_t device_total) const;

  // Why a device of `device_total` bytes would be left a limit of 0 (every allocation refused),
  // with the figures ("device.budget = 50% of 1.0 GiB is 512.0 MiB; minus device.reserve =
  // 600.0 MiB, nothing is left ..."), or "" when the limit is above 0. A percent budget, or a
  // size above the device, can only be checked once the driver says how big the device is;
  // load_config() already refuses a size budget that the reserve swallows.
  std::string nothing_left(uint64_t device_total) const;
};

struct SpillConfig {
  SpillMode mode{};
  uint64_t min_size{};  // smaller allocations never spill
  Budget host_limit;    // pinned + managed spill bytes; a fraction is of the memory available
  ManagedLocation managed_location{};
  bool managed_accessed_by{};
  uint64_t host_pool_step{};
  uint64_t host_pool_keep{};
};

// What a [[tiered.rule]] does to the tiered blocks it matches (README.md, "Rules for tiered
// blocks").
enum class RuleAction : uint8_t {
  kPin,         // never evicted
  kPreferHost,  // placed on the host and touched there: never takes device room
  kEvictFirst,  // evicted before anything the policy would choose
};
inline constexpr std::array<std::string_view, 3> kRuleActionNames = {"pin", "prefer_host",
                                                                     "evict_first"};

// One [[tiered.rule]]: a tiered block matches when its size is in [min_size, max_size] and,
// for each pattern given, some frame of the call stack that allocated it matches the pattern
// (shell wildcards, fnmatch(3)). Only the policy file sets rules; the first that matches wins.
struct TieredRule {
  RuleAction action{};
  uint64_t min_size = 0;
  uint64_t max_size = UINT64_MAX;
  std::string library;  // over a frame's library file name ("libnccl.so.2"); empty: any
  std::string symbol;   // over a frame's nearest exported symbol; empty: any
  std::string place;    // where the rule is written ("job.toml:12:1"), for the log

  bool needs_call_site() const { return !library.empty() || !symbol.empty(); }
};
// A policy file may set this many rules: each is tried in turn for every tiered block, and the
// shim counts each one's matches in a fixed array (it allocates nothing to set them up).
inline constexpr std::size_t kMaxTieredRules = 64;

struct TieredConfig {
  std::string policy;   // one of kTieredPolicyNames
  uint64_t min_size{};  // smaller linear allocations are not tiered
  uint64_t keep{};      // idle granules of each kind the arena keeps for later blocks
  WindowMode window{};
  StreamOrderedMode stream_ordered{};
  TieredMover mover{};
  TieredAdmission admission{};
  std::vector<TieredRule> rules;  // in the file's order
};

struct ReportConfig {
  MemoryInfo memory_info{};
};

struct LogConfig {
  LogLevel level{};
  std::string file;  // empty: stderr
  bool summary{};
  bool stats{};
};

struct TraceConfig {
  std::string file;  // empty: no trace; "%p" stands for the process id
  TraceFormat format{};
};

struct Config {
  DeviceConfig device;
  SpillConfig spill;
  TieredConfig tiered;
  ReportConfig report;
  LogConfig log;
  TraceConfig trace;
  std::string source_file;  // the VRAMSPILL_CONFIG file that was read; empty when none
};

// Why the configuration could not be loaded: one line per problem, each naming where it is
// (file:line:column or the environment variable), the key, what was expected and, for enums
// and unknown names, the valid choices. Ready to log as it is.
struct ConfigError {
  std::string message;                // every problem, one per line
  std::vector<std::string> problems;  // the same lines, for logging each with its own prefix
};

class ConfigResult {
 public:
  // Implicit, so load_config() can `return config;` or `return ConfigError{...};`.
  ConfigResult(Config config) : value_(std::move(config)) {}     // NOLINT(*-explicit-*)
  ConfigResult(ConfigError error) : value_(std::move(error)) {}  // NOLINT(*-explicit-*)

  bool ok() const { return std::holds_alternative<Config>(value_); }
  explicit operator bool() const { return ok(); }
  const Config& config() const { return std::get<Config>(value_); }
  const ConfigError& error() const { return std::get<ConfigError>(value_); }

 private:
  std::variant<Config, ConfigError> value_;
};

// Every option at its default.
Config default_config();

// Note [Only regular files]
// The files the configuration names, the policy and [log] file, must be regular files. A FIFO
// would block the job at start-up until someone writes to it (or reads from it), /dev/zero or
// /dev/urandom would be read without end, and a directory or a device is never what was meant.
// So they are opened with O_NONBLOCK (opening a FIFO or a device never waits; for a regular
// file the flag changes nothing, so it stays set) and refused unless fstat() says S_ISREG.

// Opens `path` with open(2) `flags` plus O_CLOEXEC, O_NOCTTY and O_NONBLOCK, and `mode` when it
// creates the file, and returns the descriptor if it is a regular file. Otherwise returns -1 and
// sets `problem`: what the path is ("it is a pipe, not a regular file") or the system's
// error ("No such file or directory").
int open_regular_file(const std::string& path, int flags, unsigned mode,
                      std::string& problem) noexcept;

// Reads VRAMSPILL_CONFIG (a TOML file; unset or empty: none) and the VRAMSPILL_* variables of
// `environment`, a null-terminated array of "NAME=VALUE" strings like `environ`. Environment
// beats file beats default. Unknown sections, keys and VRAMSPILL_* variables are errors, as are
// wrong types and malformed values. Never throws (it runs behind the C boundary of the hooks).
ConfigResult load_config(const char* const* environment) noexcept;

// The same, from the process environment.
ConfigResult load_config() noexcept;

}  // namespace vramspill
