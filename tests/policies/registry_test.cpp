#include "policies/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

namespace vramspill::policies {
namespace {

TEST(RegistryTest, NamesAreSortedUniqueAndIncludeLru) {
  const auto names = policy_names();
  EXPECT_TRUE(std::ranges::is_sorted(names));
  EXPECT_EQ(std::ranges::adjacent_find(names), names.end());
  EXPECT_NE(std::ranges::find(names, std::string_view("lru")), names.end());
}

TEST(RegistryTest, EveryNameMakesThatPolicy) {
  for (const std::string_view name : policy_names()) {
    const MadePolicy made = make_policy(name, {});
    ASSERT_NE(made.policy, nullptr) << made.error;
    EXPECT_EQ(made.policy->name(), name);
    EXPECT_TRUE(made.error.empty());
  }
}

TEST(RegistryTest, AnUnknownNameListsTheValidOnes) {
  const MadePolicy made = make_policy("lfru", {});
  EXPECT_EQ(made.policy, nullptr);
  EXPECT_NE(made.error.find("unknown eviction policy \"lfru\""), std::string::npos) << made.error;
  for (const std::string_view name : policy_names()) {
    EXPECT_NE(made.error.find(name), std::string::npos) << made.error;
  }
}

}  // namespace
}  // namespace vramspill::policies
