// What the placement tests share: fake driver facts, and the shim's log captured per test.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "placement/spill_facts.h"
#include "telemetry/log.h"
#include "telemetry/rate_limit.h"

namespace vramspill::placement {

class FakeFacts final : public SpillFacts {
 public:
  bool is_integrated = false;
  bool is_capturing = false;
  CUresult capture_query = CUDA_SUCCESS;
  int capture_queries = 0;
  int host_limit_refreshes = 0;

  bool integrated(int) noexcept override { return is_integrated; }
  CUresult capturing(CUstream, bool& capturing) noexcept override {
    ++capture_queries;
    capturing = is_capturing;
    return capture_query;
  }
  void refresh_host_limit() noexcept override { ++host_limit_refreshes; }
};

// Sends the shim's log (info and up) to a file of the running test's own, with every rate limit
// reset so that the test sees each line it causes.
class LogCapture {
 public:
  LogCapture() {
    path_ = ::testing::TempDir() + "vramspill_placement_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".log";
    std::filesystem::remove(path_);
    LogConfig log;
    log.level = LogLevel::kInfo;
    log.file = path_;
    logging::configure(log);
    reset_rate_limits();
  }

  std::string text() const {
    logging::flush();
    std::ifstream in(path_);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string path_;
};

}  // namespace vramspill::placement
