#include "core/device.h"

#include <cstring>

namespace simcuda {

Device::Device(int ordinal, uint64_t total_bytes, DeviceAttributes attributes)
    : ordinal_(ordinal),
      total_bytes_(total_bytes),
      attributes_(std::move(attributes)),
      name_("simcuda simulated GPU " + std::to_string(ordinal)) {}

CUuuid Device::uuid() const {
  // Stable and distinct per ordinal; version-4-like layout so tools print it as a UUID.
  CUuuid uuid{};
  const char tag[] = "simcuda-device";
  std::memcpy(uuid.bytes, tag, sizeof(tag) - 1);
  uuid.bytes[15] = static_cast<char>(ordinal_);
  return uuid;
}

bool Device::try_charge(uint64_t bytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > total_bytes_ - used) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (used + bytes > peak &&
         !peak_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
  return true;
}

bool Device::charge(uint64_t bytes) {
  if (try_charge(bytes)) return true;
  Reclaimer reclaimer;
  {
    std::lock_guard lock(reclaimer_mutex_);
    reclaimer = reclaimer_;
  }
  if (!reclaimer) return false;
  const uint64_t used = used_bytes();
  const uint64_t shortfall = used + bytes > total_bytes_ ? used + bytes - total_bytes_ : 0;
  reclaimer(*this, shortfall);
  return try_charge(bytes);
}

void Device::uncharge(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

void Device::set_reclaimer(Reclaimer reclaimer) {
  std::lock_guard lock(reclaimer_mutex_);
  reclaimer_ = std::move(reclaimer);
}

}  // namespace simcuda
