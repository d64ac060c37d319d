// Where `vramspill run` finds the shim when neither --library nor VRAMSPILL_LIBRARY names one
// (default_shim_library, tools/cli/shim_library.h): in the library directory the build installs
// to, seen from the program's own directory, whatever GNUInstallDirs chose there (lib,
// lib/x86_64-linux-gnu, lib64), else in the build tree's ../lib.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "shim_library.h"

namespace {

namespace fs = std::filesystem;
using vramspill::cli::default_shim_library;

class ShimLookupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vramspill-shim-lookup-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    bin_ = root_ / "usr" / "bin";
    fs::create_directories(bin_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  // An empty file named libvramspill.so in `directory` (under the root), made if missing.
  fs::path shim_in(const std::string& directory) {
    fs::create_directories(root_ / directory);
    const fs::path shim = root_ / directory / "libvramspill.so";
    std::ofstream{shim};
    return shim;
  }

  fs::path root_;
  fs::path bin_;  // the directory of the (fake) installed vramspill
};

TEST_F(ShimLookupTest, finds_an_install_in_a_multiarch_library_directory) {
  const fs::path shim = shim_in("usr/lib/x86_64-linux-gnu");
  EXPECT_EQ(default_shim_library(bin_, "../lib/x86_64-linux-gnu"), shim);
}

TEST_F(ShimLookupTest, finds_an_install_in_lib64) {
  const fs::path shim = shim_in("usr/lib64");
  EXPECT_EQ(default_shim_library(bin_, "../lib64"), shim);
}

TEST_F(ShimLookupTest, prefers_the_install_to_a_library_in_lib) {
  const fs::path shim = shim_in("usr/lib64");
  shim_in("usr/lib");
  EXPECT_EQ(default_shim_library(bin_, "../lib64"), shim);
}

TEST_F(ShimLookupTest, finds_the_build_trees_lib_when_the_install_directory_has_none) {
  const fs::path shim = shim_in("usr/lib");
  EXPECT_EQ(default_shim_library(bin_, "../lib/x86_64-linux-gnu"), shim);
}

TEST_F(ShimLookupTest, names_the_install_when_neither_exists) {
  EXPECT_EQ(default_shim_library(bin_, "../lib/x86_64-linux-gnu"),
            root_ / "usr/lib/x86_64-linux-gnu/libvramspill.so");
}

}  // namespace
