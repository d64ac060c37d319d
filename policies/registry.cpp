#include "policies/registry.h"

#include <array>

#include "policies/fifo.h"
#include "policies/largest.h"
#include "policies/learned.h"
#include "policies/lfu.h"
#include "policies/lru.h"

namespace vramspill::policies {
namespace {

struct Registered {
  std::string_view name;
  std::unique_ptr<EvictionPolicy> (*make)(const PolicyOptions&);
};

template <typename Policy>
std::unique_ptr<EvictionPolicy> make(const PolicyOptions& options) {
  return std::make_unique<Policy>(options);
}

// Sorted by name. A new policy is one line here; tests/policies then holds it to the contract.
constexpr std::array kPolicies = {
    Registered{FifoPolicy::kName, &make<FifoPolicy>},
    Registered{LargestPolicy::kName, &make<LargestPolicy>},
    Registered{LearnedPolicy::kName, &make<LearnedPolicy>},
    Registered{LfuPolicy::kName, &make<LfuPolicy>},
    Registered{LruPolicy::kName, &make<LruPolicy>},
};

constexpr std::array<std::string_view, kPolicies.size()> kNames = [] {
  std::array<std::string_view, kPolicies.size()> names{};
  for (size_t i = 0; i < kPolicies.size(); ++i) names[i] = kPolicies[i].name;
  return names;
}();

}  // namespace

std::span<const std::string_view> policy_names() noexcept { return kNames; }

MadePolicy make_policy(std::string_view name, const PolicyOptions& options) {
  for (const Registered& registered : kPolicies) {
    if (registered.name == name) return {registered.make(options), {}};
  }
  std::string error = "unknown eviction policy \"" + std::string(name) + "\" (valid: ";
  for (const std::string_view valid : kNames) {
    if (valid != kNames.front()) error += ", ";
    error += valid;
  }
  return {nullptr, error + ")"};
}

}  // namespace vramspill::policies
