// Eviction policies by name, as a policy file names them. An unknown name is an error that lists
// the valid ones, never a silent fallback to some default.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "policies/eviction_policy.h"

namespace vramspill::policies {

// Every registered name, sorted. The conformance suite (tests/policies) runs over all of them.
std::span<const std::string_view> policy_names() noexcept;

// A policy, or why there is none.
struct MadePolicy {
  std::unique_ptr<EvictionPolicy> policy;
  std::string error;  // set when policy is null
};

MadePolicy make_policy(std::string_view name, const PolicyOptions& options);

}  // namespace vramspill::policies
