// Where a cuMemCreate that does not fit on the device can be made instead: host-located VMM
// memory (Note [Host-located VMM spills] in placement/vmm_spill.h). Unlike a SpillTier it hands
// out no pointer: the program gets a handle, maps it and frees it itself, so the tier only says
// where such memory can live for a device and creates it there. Placement reaches it through
// this interface, so unit tests run it with a fake.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace vramspill::tiers {

// Where host-located VMM memory for one device can be created.
struct HostVmmLocation {
  enum class Kind : uint8_t {
    kNone,      // the device supports no host-located VMM memory
    kHostNuma,  // CU_MEM_LOCATION_TYPE_HOST_NUMA on the device's own host NUMA node
    kHost,      // CU_MEM_LOCATION_TYPE_HOST (no node)
  };
  Kind kind = Kind::kNone;
  int numa_node = 0;  // kHostNuma only: the node's id, never negative

  bool operator==(const HostVmmLocation&) const = default;
};

class HostVmmTier {
 public:
  HostVmmTier(const HostVmmTier&) = delete;
  HostVmmTier& operator=(const HostVmmTier&) = delete;

  // Where `device`'s host-located VMM memory goes; nullopt when the driver did not answer. A
  // known answer is kept per device; a refused query is asked again next time, since keeping
  // one failure would disable these spills for the whole process (as Note [Spill tiers] says).
  std::optional<HostVmmLocation> location(int device) noexcept;

  // cuMemCreate of `prop` (host-located) and `flags`, as the driver answers it.
  CUresult create(CUmemGenericAllocationHandle* out, uint64_t bytes,
                  const CUmemAllocationProp& prop, unsigned long long flags) noexcept {
    return do_create(out, bytes, prop, flags);
  }

 protected:
  HostVmmTier() noexcept = default;
  ~HostVmmTier() = default;  // never destroyed through this interface

 private:
  virtual std::optional<HostVmmLocation> do_query_location(int device) noexcept = 0;
  virtual CUresult do_create(CUmemGenericAllocationHandle* out, uint64_t bytes,
                             const CUmemAllocationProp& prop,
                             unsigned long long flags) noexcept = 0;

  static constexpr std::size_t kDevices = 64;
  // Per device: 0 not known yet, else encode() of the answer.
  std::array<std::atomic<int64_t>, kDevices> known_{};
};

}  // namespace vramspill::tiers
