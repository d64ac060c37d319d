// The cost model: where the bytes a copy or kernel touches live, what moving them costs on the
// modeled GPU, and the counters that record it (DeviceCounters). Every figure is modeled from
// the configured bandwidths (SIMCUDA_HBM_BW, SIMCUDA_LINK_BW), never measured.
#pragma once

#include <cstdint>

namespace simcuda {

class Device;

enum class Access { kRead, kWrite };
enum class Engine { kKernel, kCopy };

// Accounts for `engine` on `device` touching [address, address + size): device memory costs HBM
// bandwidth; host memory (pinned, registered, host-located VMM) costs link bandwidth; managed
// memory is first migrated to the device by a kernel (faults and migrations are counted) and
// read where it lives by a copy. Returns the modeled seconds.
//
// Note [A range is charged mapping by mapping]
// A range may cross several allocations: a VMM reservation is mapped piece by piece (tiered
// mode's blocks are one 2 MiB granule per mapping, some device- and some host-located). Each
// piece is charged where it lives. Charging the whole range by its first mapping, as this once
// did for kernels, billed a kernel over a 16 MiB block of host granules for 2 MiB of link
// traffic, so touching evicted blocks in place looked 8 times cheaper than it is (found by
// tools/demo/tier_probe.c: host granules read at 27x the rate of pinned memory). An address in
// the device's span that no allocation holds ends the charge: the access faults there.
double account_access(Device& device, Engine engine, uint64_t address, uint64_t size,
                      Access access);

// The modeled time at which the last prefetch bringing managed pages of [address, address +
// size) to `device` ends, of the pages there now: a kernel touching them starts no earlier
// (Note [Waiting for a prefetch] in managed.cpp). 0 when none is arriving.
double prefetched_arrival(const Device& device, uint64_t address, uint64_t size);

}  // namespace simcuda
