#include "tiers/host_vmm_tier.h"

namespace vramspill::tiers {
namespace {

using Kind = HostVmmLocation::Kind;

// 1: none, 2: HOST, 3 + n: HOST_NUMA node n (0 is "not known yet").
int64_t encode(const HostVmmLocation& location) {
  switch (location.kind) {
    case Kind::kNone:
      return 1;
    case Kind::kHost:
      return 2;
    case Kind::kHostNuma:
      break;
  }
  return 3 + int64_t{location.numa_node};
}

HostVmmLocation decode(int64_t known) {
  if (known == 1) return {};
  if (known == 2) return {.kind = Kind::kHost};
  return {.kind = Kind::kHostNuma, .numa_node = static_cast<int>(known - 3)};
}

}  // namespace

std::optional<HostVmmLocation> HostVmmTier::location(int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return HostVmmLocation{};
  std::atomic<int64_t>& known = known_[static_cast<std::size_t>(device)];
  if (const int64_t value = known.load(std::memory_order_relaxed); value != 0) return decode(value);
  const std::optional<HostVmmLocation> answer = do_query_location(device);
  if (!answer) return std::nullopt;  // not for this request; asked again for the next
  known.store(encode(*answer), std::memory_order_relaxed);
  return answer;
}

}  // namespace vramspill::tiers
