// Which [[tiered.rule]] a block falls under (placement/tiered_rules.h), and the call stacks the
// patterns are matched against (util/call_stack.h, Note [Call sites through libunwind]).
#include "placement/tiered_rules.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace vramspill::placement {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TieredRule rule(RuleAction action, std::string library = {}, std::string symbol = {},
                uint64_t min_size = 0, uint64_t max_size = UINT64_MAX) {
  return {.action = action,
          .min_size = min_size,
          .max_size = max_size,
          .library = std::move(library),
          .symbol = std::move(symbol),
          .place = "job.toml:1:1"};
}

TEST(TieredRules, TheFirstMatchingRuleWinsAndIsCounted) {
  const std::vector<TieredRule> rules = {
      rule(RuleAction::kPin, "libnccl*"),
      rule(RuleAction::kPreferHost, {}, {}, 64 * kMiB),
      rule(RuleAction::kEvictFirst, {}, "*kv_cache*", 0, 8 * kMiB),
  };
  TieredRules matcher(rules);
  EXPECT_TRUE(matcher.need_call_sites());
  const std::vector<CallFrame> nccl = {{"libcudart.so.12", "cudaMalloc"},
                                       {"libnccl.so.2", "ncclMemAlloc"}};
  const std::vector<CallFrame> cache = {{"libserve.so", "grow_kv_cache_block"}};
  const std::vector<CallFrame> other = {{"python3.11", "main"}};

  EXPECT_EQ(matcher.match(128 * kMiB, nccl), &rules[0]) << "the first rule wins over the second";
  EXPECT_EQ(matcher.match(128 * kMiB, other), &rules[1]);
  EXPECT_EQ(matcher.match(4 * kMiB, cache), &rules[2]);
  EXPECT_EQ(matcher.match(16 * kMiB, cache), nullptr) << "over the third rule's max_size";
  EXPECT_EQ(matcher.match(4 * kMiB, other), nullptr);
  EXPECT_EQ(matcher.match(4 * kMiB, {}), nullptr) << "no stack: patterns cannot match";
  EXPECT_EQ(matcher.summary(),
            "tiered rules: job.toml:1:1 pin matched 1 block, job.toml:1:1 prefer_host matched 1 "
            "block, job.toml:1:1 evict_first matched 1 block");
}

TEST(TieredRules, BothPatternsMustMatchAndSizeRulesNeedNoStack) {
  const std::vector<TieredRule> rules = {rule(RuleAction::kPin, "libnccl*", "nccl*")};
  TieredRules matcher(rules);
  EXPECT_EQ(matcher.match(kMiB, {{{"libnccl.so.2", "cudaMalloc"}}}), nullptr);
  EXPECT_NE(matcher.match(kMiB, {{{"libnccl.so.2", "ncclMemAlloc"}}}), nullptr);

  const std::vector<TieredRule> by_size = {rule(RuleAction::kPreferHost, {}, {}, kMiB, kMiB)};
  TieredRules sized(by_size);
  EXPECT_FALSE(sized.need_call_sites());
  EXPECT_NE(sized.match(kMiB, {}), nullptr);
  EXPECT_EQ(sized.match(kMiB + 1, {}), nullptr);
}

TEST(TieredRules, NoRulesNoSummary) {
  TieredRules none({});
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.match(kMiB, {}), nullptr);
  EXPECT_EQ(none.summary(), "");
}

// The stack inside qsort's comparator: this test's frames, then libc's, then this test's again.
CallStack captured;
const void* skipped = nullptr;
bool captured_ok = false;

int compare_and_capture(const void* a, const void* b) {
  std::string_view why;
  captured_ok = capture_call_stack(skipped, captured, why);
  EXPECT_TRUE(captured_ok) << why;
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

bool has_library(const CallStack& stack, std::string_view library) {
  for (const CallFrame& frame : stack.view())
    if (frame.library == library) return true;
  return false;
}

TEST(CallStack, FramesNameTheirLibrariesAndTheSkippedObjectIsLeftOut) {
  int values[] = {2, 1};
  skipped = nullptr;
  std::qsort(values, 2, sizeof(int), compare_and_capture);
  ASSERT_TRUE(captured_ok);
  EXPECT_TRUE(has_library(captured, "libc.so.6"));
  EXPECT_TRUE(has_library(captured, "vramspill_tiered_rules_test"));

  // An address in libc itself: under AddressSanitizer, &std::qsort is the sanitizer's wrapper.
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  skipped = dlsym(libc, "qsort");
  dlclose(libc);
  ASSERT_NE(skipped, nullptr);
  std::qsort(values, 2, sizeof(int), compare_and_capture);
  ASSERT_TRUE(captured_ok);
  EXPECT_FALSE(has_library(captured, "libc.so.6"));
  EXPECT_TRUE(has_library(captured, "vramspill_tiered_rules_test"));
}

}  // namespace
}  // namespace vramspill::placement
