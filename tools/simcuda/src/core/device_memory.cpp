#include "core/device_memory.h"

#include <unistd.h>

#include "core/device.h"
#include "core/driver.h"

namespace simcuda {

uint64_t page_size() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

uint64_t round_up(uint64_t value, uint64_t multiple) {
  uint64_t padded = 0;
  if (__builtin_add_overflow(value, multiple - 1, &padded)) return UINT64_MAX;
  return padded / multiple * multiple;
}

CUresult map_new_memory(Device& device, const MemoryRequest& request, Allocation& out) {
  Driver& driver = *Driver::instance();
  const uint64_t mapped = round_up(request.size, page_size());
  if (request.charge_vram && !device.charge(mapped)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t alignment = mapped >= kLargePage ? kLargePage : page_size();
  const std::optional<uint64_t> address = driver.addresses().reserve(mapped, alignment);
  const std::optional<uint64_t> offset = driver.physical().allocate(mapped);
  if (!address || !offset ||
      !driver.addresses().map(*address, mapped, driver.physical().fd(), *offset,
                              request.host_accessible)) {
    if (address) driver.addresses().release(*address, mapped);
    if (offset) driver.physical().release(*offset, mapped);
    if (request.charge_vram) device.uncharge(mapped);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  out.base = *address;
  out.size = request.size;
  out.mapped = mapped;
  out.kind = request.kind;
  out.device = device.ordinal();
  out.file_offset = *offset;
  return CUDA_SUCCESS;
}

void unmap_memory(const Allocation& allocation, uint64_t charged_bytes) {
  Driver& driver = *Driver::instance();
  driver.addresses().release(allocation.base, allocation.mapped);
  driver.physical().release(allocation.file_offset, allocation.mapped);
  if (charged_bytes != 0) driver.device(allocation.device)->uncharge(charged_bytes);
}

void* device_view(uint64_t address) {
  AddressSpace& addresses = Driver::instance()->addresses();
  return addresses.contains(address) ? addresses.shadow(address) : reinterpret_cast<void*>(address);
}

}  // namespace simcuda
