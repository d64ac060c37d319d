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
// Where an allocation over the limit goes (DESIGN.md section 3).
enum class SpillMode : uint8_t { kOff, kManaged, kHost, kAuto };
inline constexpr std::array<std::string_view, 4> kSpillModeNames = {"off", "managed", "host",
                                                                    "auto"};

// The preferred location given to managed memory that holds a spilled allocation.
enum class ManagedLocation : uint8_t { kHost, kDevice, kNone };
inline constexpr std::array<std::string_view, 3> kManagedLocationNames = {"host", "device",
                                                                          "none"};

// What cuMemGetInfo reports under the shim.
enum class MemoryInfo : uint8_t { kBudget, kPhysical, kVirtual };
inline constexpr std::array<std::string_view, 3> kMemoryInfoNames = {"budget", "physical",
                                                                     "virtual"};

enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kOff };
inline constexpr std::array<std::string_view, 6> kLogLevelNames = {"trace", "debug", "info",
                                                                   "warn",  "error", "off"};

struct DeviceConfig {
  Budget budget;
  uint64_t reserve_bytes{};

  // What the ledger enforces: min(budget, device_total) - reserve, never below zero.
  uint64_t limit(uint64_t device_total) const;
};

struct SpillConfig {
  SpillMode mode{};
  uint64_t min_size{};  // smaller allocations never spill
  Budget host_limit;    // pinned + managed spill bytes; a fraction is of MemAvailable at start
  ManagedLocation managed_location{};
  bool managed_accessed_by{};
  uint64_t host_pool_step{};
  uint64_t host_pool_keep{};
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

struct Config {
  DeviceConfig device;
  SpillConfig spill;
  ReportConfig report;
  LogConfig log;
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

// Reads VRAMSPILL_CONFIG (a TOML file; unset or empty: none) and the VRAMSPILL_* variables of
// `environment`, a null-terminated array of "NAME=VALUE" strings like `environ`. Environment
// beats file beats default. Unknown sections, keys and VRAMSPILL_* variables are errors, as are
// wrong types and malformed values. Never throws (it runs behind the C boundary of the hooks).
ConfigResult load_config(const char* const* environment) noexcept;

// The same, from the process environment.
ConfigResult load_config() noexcept;

}  // namespace vramspill
