// One simulated GPU: its VRAM ledger, attributes and counters.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "core/device_attributes.h"

namespace simcuda {

struct Context;

// Counters of one device, written to SIMCUDA_STATS at exit. Byte counts of traffic are what the
// cost model charges; none of them is a measurement.
struct DeviceCounters {
  std::atomic<uint64_t> link_bytes_copies{0};      // memcpy across the host link
  std::atomic<uint64_t> link_bytes_zero_copy{0};   // kernels reading/writing host memory
  std::atomic<uint64_t> link_bytes_migrations{0};  // managed pages moved either way
  std::atomic<uint64_t> device_bytes_touched{0};   // kernel and copy traffic to device memory
  std::atomic<uint64_t> managed_faults{0};         // managed pages migrated on access
  std::atomic<uint64_t> managed_evictions{0};      // managed pages pushed out of VRAM
  std::atomic<uint64_t> kernel_launches{0};
};

class Device {
 public:
  Device(int ordinal, uint64_t total_bytes, DeviceAttributes attributes);

  int ordinal() const { return ordinal_; }
  uint64_t total_bytes() const { return total_bytes_; }
  const DeviceAttributes& attributes() const { return attributes_; }
  const std::string& name() const { return name_; }
  CUuuid uuid() const;

  // VRAM ledger. charge() fails (false) when the bytes do not fit; before failing it asks the
  // reclaimer (managed memory's eviction, set by the managed module) to make room, as the
  // driver evicts managed pages to satisfy device allocations.
  bool charge(uint64_t bytes);
  void uncharge(uint64_t bytes);
  uint64_t used_bytes() const { return used_.load(std::memory_order_relaxed); }
  uint64_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  // Frees at least `bytes` of VRAM if it can; returns bytes freed.
  using Reclaimer = std::function<uint64_t(Device&, uint64_t bytes)>;
  void set_reclaimer(Reclaimer reclaimer);

  DeviceCounters& counters() { return counters_; }
  Context* primary_context() const { return primary_; }
  void set_primary_context(Context* context) { primary_ = context; }

 private:
  bool try_charge(uint64_t bytes);

  int ordinal_;
  uint64_t total_bytes_;
  DeviceAttributes attributes_;
  std::string name_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> peak_{0};
  std::mutex reclaimer_mutex_;
  Reclaimer reclaimer_;
  DeviceCounters counters_;
  Context* primary_ = nullptr;
};

}  // namespace simcuda
