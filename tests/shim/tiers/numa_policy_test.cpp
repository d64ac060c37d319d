// tiers::ScopedPreferredNode: the calling thread prefers the node inside the scope, and gets its
// old policy back after it.
#include <gtest/gtest.h>

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "tiers/numa_policy.h"

namespace vramspill::tiers {
namespace {

struct Policy {
  int mode = -1;
  unsigned long mask[16] = {};
};

Policy current_policy() {
  Policy policy;
  if (syscall(SYS_get_mempolicy, &policy.mode, policy.mask, 1024UL, nullptr, 0UL) != 0) {
    policy.mode = -1;
  }
  return policy;
}

TEST(ScopedPreferredNode, NoNodeMeansNoChange) {
  const Policy before = current_policy();
  ScopedPreferredNode scope(-1);
  EXPECT_FALSE(scope.active());
  EXPECT_EQ(scope.error(), 0);
  EXPECT_EQ(current_policy().mode, before.mode);
}

TEST(ScopedPreferredNode, PrefersTheNodeInsideTheScopeAndRestoresAfter) {
  const Policy before = current_policy();
  {
    ScopedPreferredNode scope(0);
    if (!scope.active()) {
      GTEST_SKIP() << "set_mempolicy refused here (errno " << scope.error()
                   << "); containers often forbid it";
    }
    const Policy inside = current_policy();
    EXPECT_EQ(inside.mode, MPOL_PREFERRED);
    EXPECT_EQ(inside.mask[0], 1UL);
  }
  EXPECT_EQ(current_policy().mode, before.mode);
}

}  // namespace
}  // namespace vramspill::tiers
