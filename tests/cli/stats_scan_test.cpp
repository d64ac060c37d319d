// scan_stats_directories: an unreadable stats file is reported once while it stays, and the paths
// remembered as reported are only those still unreadable.
#include "stats_scan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace vramspill::cli {
namespace {

namespace fs = std::filesystem;

TEST(StatsScan, AnUnreadableFileIsReportedOnceWhileItStays) {
  const fs::path directory = fs::path(::testing::TempDir()) / "vramspill_stats_scan_test";
  fs::remove_all(directory);
  fs::create_directories(directory);
  fs::permissions(directory, fs::perms::owner_all);  // as the shim makes it: no one else's
  const std::string garbage = (directory / "7.stats").string();
  std::ofstream(garbage) << std::string(4096, 'x');
  std::vector<std::string> reported;

  const auto scan = [&] {
    ::testing::internal::CaptureStderr();
    const std::vector<telemetry::StatsEntry> entries =
        scan_stats_directories({directory.string()}, "test", reported);
    EXPECT_EQ(entries.size(), fs::exists(garbage) ? 1u : 0u);
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_NE(scan().find("test: skipping " + garbage + ": "), std::string::npos);
  EXPECT_EQ(scan(), "") << "reported again";
  EXPECT_EQ(reported, std::vector<std::string>{garbage});

  fs::remove(garbage);
  EXPECT_EQ(scan(), "");
  EXPECT_TRUE(reported.empty()) << "a file that went is still remembered";

  std::ofstream(garbage) << std::string(4096, 'y');  // the same name, another job's
  EXPECT_NE(scan().find("test: skipping " + garbage + ": "), std::string::npos);
  fs::remove_all(directory);
}

}  // namespace
}  // namespace vramspill::cli
