// What the job-safety tests share: job_safety_program run under the shim on simcuda (64 MiB of
// VRAM, one device), in a scratch directory of its own.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "scratch_directory.h"
#include "subprocess.h"

namespace vramspill::testing {

namespace fs = std::filesystem;

// Seconds a run may take: a policy or log file that blocks the job shows up as a time-out.
inline constexpr int kTimeoutSeconds = 30;

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class JobSafety : public vramspill::testing::ScratchDirectoryTest {
 protected:
  // The program under the shim on simcuda, none of the caller's VRAMSPILL_* settings, plus
  // `extra`; with `stderr_closed`, started as `program 2>&-` by a shell; started by `wrapper`
  // (a command that ends by running the words after it) when there is one.
  static RunResult run(std::vector<std::string> arguments, const Environment& extra,
                       bool stderr_closed = false, const std::vector<std::string>& wrapper = {}) {
    Environment environment = {{"LD_LIBRARY_PATH", VRAMSPILL_TEST_SIMCUDA_DIR},
                               {"LD_PRELOAD", VRAMSPILL_TEST_PRELOAD},
                               {"SIMCUDA_VRAM", "64MiB"},
                               {"SIMCUDA_DEVICES", "1"}};
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string text = *entry;
      if (text.starts_with("VRAMSPILL_") || text.starts_with("SIMCUDA_"))
        environment.emplace(text.substr(0, text.find('=')), kUnset);
    }
    for (const auto& [name, value] : extra) environment[name] = value;
    arguments.insert(arguments.begin(), JOB_SAFETY_PROGRAM);
    arguments.insert(arguments.begin(), wrapper.begin(), wrapper.end());
    if (stderr_closed)
      arguments.insert(arguments.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&-"});
    return run_program(arguments, environment, kTimeoutSeconds);
  }

  std::string make_fifo(const std::string& name) const {
    const std::string path = (root_ / name).string();
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0);
    return path;
  }
};

// Spills over an 8 MiB budget, logged at info, and the exit summary.
inline const Environment kSpillingJob = {{"VRAMSPILL_DEVICE_BUDGET", "8MiB"},
                                         {"VRAMSPILL_SPILL_MODE", "managed"},
                                         {"VRAMSPILL_SPILL_HOST_LIMIT", "256MiB"},
                                         {"VRAMSPILL_LOG_LEVEL", "info"}};

}  // namespace vramspill::testing
