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
double account_access(Device& device, Engine engine, uint64_t address, uint64_t size,
                      Access access);

}  // namespace simcuda
