// Helpers for driving load_config() without touching the test process's own environment.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"

namespace vramspill::testing {

// A null-terminated NAME=VALUE array like `environ`, owning its strings.
class FakeEnvironment {
 public:
  explicit FakeEnvironment(std::vector<std::string> entries) : entries_(std::move(entries)) {
    for (const std::string& entry : entries_) pointers_.push_back(entry.c_str());
    pointers_.push_back(nullptr);
  }
  const char* const* get() const { return pointers_.data(); }

 private:
  std::vector<std::string> entries_;
  std::vector<const char*> pointers_;
};

inline ConfigResult load(std::vector<std::string> environment) {
  return load_config(FakeEnvironment(std::move(environment)).get());
}

// Writes `text` to a file in the test's temporary directory, named after the running test.
inline std::string write_file(const std::string& text, const std::string& suffix = ".toml") {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string path =
      ::testing::TempDir() + "vramspill_" + test->test_suite_name() + "_" + test->name() + suffix;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

// Loads `toml` as the VRAMSPILL_CONFIG file, plus `environment`; sets `path` to the file's path.
inline ConfigResult load_toml(const std::string& toml, std::string& path,
                              std::vector<std::string> environment = {}) {
  path = write_file(toml);
  environment.push_back("VRAMSPILL_CONFIG=" + path);
  return load(std::move(environment));
}

}  // namespace vramspill::testing
