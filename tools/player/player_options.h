// The workload player's command line (workload_player --help).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace vramspill::player {

struct PlayerOptions {
  std::string trace;
  std::optional<size_t> steps;       // --steps N; nullopt: found (Note [Finding the steps])
  std::optional<size_t> play_steps;  // --play-steps K; nullopt: all
  std::optional<int> trace_device;   // nullopt: the device of the first allocation
  std::string kernels;               // empty: simcuda's kernels (any image loads there)
  bool verify_at_free = true;
  bool self_test = false;
  bool quiet = false;
};

// Exit statuses.
inline constexpr int kVerified = 0;
inline constexpr int kDriverFailed = 1;
inline constexpr int kBadInput = 2;
inline constexpr int kMismatch = 3;

// The options, or the exit status when the program is done (--help, or a bad option, with its
// message printed).
struct ParsedOptions {
  PlayerOptions options;
  std::optional<int> exit_status;
};
ParsedOptions parse_player_options(int argc, char** argv);

}  // namespace vramspill::player
