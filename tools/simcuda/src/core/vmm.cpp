// Reservations, physical handles, mappings and access (Note [VMM model] in vmm.h). One mutex
// guards the three tables; VRAM is charged before taking it, so the managed-memory reclaimer
// that Device::charge may call never runs under it.
#include "core/vmm.h"

#include <sys/mman.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"

namespace simcuda {
namespace {

constexpr int kHostBit = 63;

struct Handle {
  uint64_t size = 0;
  uint64_t file_offset = 0;
  CUmemAllocationProp prop{};
  int device = -1;     // whose VRAM it is charged to; -1 for host memory
  int references = 1;  // cuMemCreate and cuMemRetainAllocationHandle, less cuMemRelease
  int mappings = 0;
};

// Who may touch one granule: bit d for device d, kHostBit for the host.
struct Granule {
  uint64_t read = 0;
  uint64_t write = 0;
};

struct Mapping {
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool host = false;
  std::vector<Granule> access;
  Allocation allocation;  // what the registry holds while every granule is device-accessible
  bool registered = false;
};

struct Reservation {
  uint64_t size = 0;
  // Per granule: mapped at some time. A granule mapped once and unmapped now is in the middle
  // of a remap (Note [Remap protocol] in remap_check.h).
  std::vector<bool> ever_mapped;
};

struct State {
  std::mutex mutex;
  std::map<uint64_t, Reservation> reservations;  // base -> reservation
  std::map<CUmemGenericAllocationHandle, Handle> handles;
  std::map<uint64_t, Mapping> mappings;                   // base -> mapping
  CUmemGenericAllocationHandle next_handle = 0x5e1c0000;  // opaque, never 0
};

State& state() {
  static auto* created = new State();  // never destroyed: exit-time callers may still call in
  return *created;
}

bool aligned(uint64_t value) { return value % kVmmGranularity == 0; }

// Adds the granules of `size` bytes of host-located (`host`) or device memory to `granules`.
void count_granules(bool host, uint64_t size, GranuleCount& granules) {
  (host ? granules.host : granules.device) += size / kVmmGranularity;
}

// The mapping holding `address`, or end().
std::map<uint64_t, Mapping>::iterator mapping_at(State& s, uint64_t address) {
  auto it = s.mappings.upper_bound(address);
  if (it == s.mappings.begin()) return s.mappings.end();
  --it;
  return address - it->first < it->second.size ? it : s.mappings.end();
}

// Calls visit(base, mapping) for the mappings covering [address, address + size); false when
// some byte of it is not mapped.
template <typename Visit>
bool for_mappings(State& s, uint64_t address, uint64_t size, Visit visit) {
  for (uint64_t at = address; at < address + size;) {
    auto it = mapping_at(s, at);
    if (it == s.mappings.end()) return false;
    visit(it->first, it->second);
    at = it->first + it->second.size;
  }
  return true;
}

// The reservation holding all of [address, address + size), or end().
std::map<uint64_t, Reservation>::iterator reservation_of(State& s, uint64_t address,
                                                         uint64_t size) {
  auto it = s.reservations.upper_bound(address);
  if (it == s.reservations.begin()) return s.reservations.end();
  --it;
  const bool inside = address >= it->first && address + size <= it->first + it->second.size;
  return inside ? it : s.reservations.end();
}

void free_if_unused(State& s, std::map<CUmemGenericAllocationHandle, Handle>::iterator it) {
  const Handle& handle = it->second;
  if (handle.references > 0 || handle.mappings > 0) return;
  Driver& driver = *Driver::instance();
  driver.physical().release(handle.file_offset, handle.size);
  if (handle.device >= 0) driver.device(handle.device)->uncharge(handle.size);
  s.handles.erase(it);
}

int protection(uint64_t read, uint64_t write, uint64_t who) {
  if ((write & who) != 0) return PROT_READ | PROT_WRITE;
  return (read & who) != 0 ? PROT_READ : PROT_NONE;
}

constexpr uint64_t kAnyDevice = ~(uint64_t{1} << kHostBit);

// A mapping is in the allocation registry only while devices may read all of it, so that the
// copy engine's range check refuses an inaccessible one instead of faulting on it
// (Note [VMM model]).
void update_registration(Mapping& mapping) {
  bool accessible = true;
  for (const Granule& granule : mapping.access) accessible &= (granule.read & kAnyDevice) != 0;
  if (accessible == mapping.registered) return;
  AllocationRegistry& registry = Driver::instance()->allocations();
  if (accessible)
    mapping.allocation.buffer_id = registry.add(mapping.allocation);
  else
    registry.remove(mapping.allocation.base);
  mapping.registered = accessible;
}

// Applies a granule's access to the views: the shadow view gets the most any device has.
void protect(uint64_t address, const Granule& granule, bool host_memory) {
  AddressSpace& addresses = Driver::instance()->addresses();
  mprotect(addresses.shadow(address), kVmmGranularity,
           protection(granule.read, granule.write, kAnyDevice));
  if (host_memory)
    mprotect(reinterpret_cast<void*>(address), kVmmGranularity,
             protection(granule.read, granule.write, uint64_t{1} << kHostBit));
}

}  // namespace

CUresult vmm_reserve(uint64_t size, uint64_t alignment, uint64_t hint, CUdeviceptr* out) {
  if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  alignment = std::max(alignment, kVmmGranularity);
  const std::optional<uint64_t> base =
      Driver::instance()->addresses().reserve(size, alignment, hint);
  if (!base) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.reservations[*base] = Reservation{size, std::vector<bool>(size / kVmmGranularity)};
  *out = *base;
  return CUDA_SUCCESS;
}

CUresult vmm_free_reservation(uint64_t address, uint64_t size) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.reservations.find(address);
  if (it == s.reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  // Mappings must be gone first; freeing under them would leave dangling registry entries.
  auto mapped = s.mappings.lower_bound(address);
  if (mapped != s.mappings.end() && mapped->first < address + size) return CUDA_ERROR_INVALID_VALUE;
  s.reservations.erase(it);
  Driver::instance()->addresses().release(address, size);
  return CUDA_SUCCESS;
}

CUresult vmm_create(uint64_t size, const CUmemAllocationProp& prop, int device,
                    CUmemGenericAllocationHandle* out) {
  Driver& driver = *Driver::instance();
  if (device >= 0 && !driver.device(device)->charge(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::optional<uint64_t> offset = driver.physical().allocate(size);
  if (!offset) {
    if (device >= 0) driver.device(device)->uncharge(size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  const CUmemGenericAllocationHandle id = s.next_handle++;
  s.handles[id] = Handle{.size = size, .file_offset = *offset, .prop = prop, .device = device};
  *out = id;
  return CUDA_SUCCESS;
}

CUresult vmm_release(CUmemGenericAllocationHandle handle) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.references;
  free_if_unused(s, it);
  return CUDA_SUCCESS;
}

CUresult vmm_properties(CUmemGenericAllocationHandle handle, CUmemAllocationProp* out,
                        uint64_t* size) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second.prop;
  if (size != nullptr) *size = it->second.size;
  return CUDA_SUCCESS;
}

CUresult vmm_retain(uint64_t address, CUmemGenericAllocationHandle* out) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto mapping = mapping_at(s, address);
  if (mapping == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  ++s.handles.at(mapping->second.handle).references;
  *out = mapping->second.handle;
  return CUDA_SUCCESS;
}

CUresult vmm_map(uint64_t address, uint64_t size, uint64_t offset,
                 CUmemGenericAllocationHandle handle, GranuleCount* granules) {
  if (size == 0 || !aligned(address) || !aligned(size) || !aligned(offset))
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto found = s.handles.find(handle);
  if (found == s.handles.end() || found->second.references == 0) return CUDA_ERROR_INVALID_HANDLE;
  Handle& physical = found->second;
  if (offset > physical.size || size > physical.size - offset) return CUDA_ERROR_INVALID_VALUE;
  const auto reservation = reservation_of(s, address, size);
  if (reservation == s.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
  auto next = s.mappings.lower_bound(address);
  if (mapping_at(s, address) != s.mappings.end() ||
      (next != s.mappings.end() && next->first < address + size))
    return CUDA_ERROR_INVALID_VALUE;  // already mapped
  Driver& driver = *Driver::instance();
  if (!driver.addresses().map(address, size, driver.physical().fd(), physical.file_offset + offset,
                              /*host_accessible=*/false))
    return CUDA_ERROR_OUT_OF_MEMORY;
  mprotect(driver.addresses().shadow(address), size, PROT_NONE);  // until cuMemSetAccess
  std::vector<bool>& ever_mapped = reservation->second.ever_mapped;
  const uint64_t first = (address - reservation->first) / kVmmGranularity;
  std::fill_n(ever_mapped.begin() + static_cast<std::ptrdiff_t>(first), size / kVmmGranularity,
              true);
  const bool host = physical.device < 0;
  *granules = {};
  count_granules(host, size, *granules);
  ++physical.mappings;
  Context* context = current_context();
  const int owner = host ? (context != nullptr ? context->device->ordinal() : 0) : physical.device;
  if (context == nullptr || context->device->ordinal() != owner)
    context = driver.device(owner)->primary_context();
  s.mappings[address] =
      Mapping{.size = size,
              .handle = handle,
              .host = host,
              .access = std::vector<Granule>(size / kVmmGranularity),
              .allocation = Allocation{.base = address,
                                       .size = size,
                                       .mapped = size,
                                       .kind = MemoryKind::kVmmMapping,
                                       .device = owner,
                                       .host_located = host,
                                       .context = context,
                                       .file_offset = physical.file_offset + offset,
                                       .vmm_handle = handle,
                                       .vmm_offset = offset}};
  return CUDA_SUCCESS;
}

CUresult vmm_unmap(uint64_t address, uint64_t size, GranuleCount* granules) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  // The range must be made of whole mappings, as the driver requires.
  std::vector<uint64_t> bases;
  for (uint64_t at = address; at < address + size;) {
    auto it = s.mappings.find(at);
    if (it == s.mappings.end() || it->second.size > address + size - at)
      return CUDA_ERROR_INVALID_VALUE;
    bases.push_back(at);
    at += it->second.size;
  }
  if (bases.empty()) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = *Driver::instance();
  *granules = {};
  for (uint64_t base : bases) {
    auto it = s.mappings.find(base);
    count_granules(it->second.host, it->second.size, *granules);
    if (it->second.registered) driver.allocations().remove(base);
    driver.addresses().unmap(base, it->second.size);
    auto handle = s.handles.find(it->second.handle);
    --handle->second.mappings;
    s.mappings.erase(it);
    free_if_unused(s, handle);
  }
  return CUDA_SUCCESS;
}

CUresult vmm_set_access(uint64_t address, uint64_t size, const CUmemAccessDesc* descriptors,
                        size_t count, bool* revoked, GranuleCount* granules) {
  if (size == 0 || !aligned(address) || !aligned(size) || descriptors == nullptr || count == 0)
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  bool any_device_memory = false;
  if (!for_mappings(s, address, size, [&](uint64_t, Mapping& m) { any_device_memory |= !m.host; }))
    return CUDA_ERROR_INVALID_VALUE;  // every byte must be mapped
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& desc = descriptors[i];
    if (desc.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        desc.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
    if (desc.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (Driver::instance()->device(desc.location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    } else if (desc.location.type == CU_MEM_LOCATION_TYPE_HOST ||
               desc.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
               desc.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
      if (any_device_memory) return CUDA_ERROR_NOT_SUPPORTED;  // the CPU cannot reach VRAM
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  *revoked = false;
  *granules = {};
  for (uint64_t at = address; at < address + size; at += kVmmGranularity) {
    auto it = mapping_at(s, at);
    count_granules(it->second.host, kVmmGranularity, *granules);
    Granule& granule = it->second.access[(at - it->first) / kVmmGranularity];
    const Granule before = granule;
    for (size_t i = 0; i < count; ++i) {
      const CUmemAccessDesc& desc = descriptors[i];
      const uint64_t who = desc.location.type == CU_MEM_LOCATION_TYPE_DEVICE
                               ? uint64_t{1} << desc.location.id
                               : uint64_t{1} << kHostBit;
      granule.read =
          (desc.flags & CU_MEM_ACCESS_FLAGS_PROT_READ) ? granule.read | who : granule.read & ~who;
      granule.write = desc.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? granule.write | who
                                                                       : granule.write & ~who;
    }
    *revoked |= (before.read & ~granule.read) != 0 || (before.write & ~granule.write) != 0;
    protect(at, granule, it->second.host);
  }
  for_mappings(s, address, size, [](uint64_t, Mapping& m) { update_registration(m); });
  return CUDA_SUCCESS;
}

CUresult vmm_get_access(uint64_t address, const CUmemLocation& location,
                        unsigned long long* flags) {
  uint64_t who = 0;
  if (location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (Driver::instance()->device(location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    who = uint64_t{1} << location.id;
  } else if (location.type == CU_MEM_LOCATION_TYPE_HOST ||
             location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
             location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
    who = uint64_t{1} << kHostBit;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = mapping_at(s, address);
  if (it == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  const Granule& granule = it->second.access[(address - it->first) / kVmmGranularity];
  *flags = (granule.write & who) != 0  ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
           : (granule.read & who) != 0 ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                       : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

void vmm_forget_context(const Context& context) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Driver& driver = *Driver::instance();
  for (auto& [base, mapping] : s.mappings) {
    if (mapping.allocation.context != &context) continue;
    mapping.allocation.context = driver.device(mapping.allocation.device)->primary_context();
    if (mapping.registered) driver.allocations().set_context(base, mapping.allocation.context);
  }
}

bool vmm_remap_in_progress(uint64_t address) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto reservation = reservation_of(s, address, 1);
  if (reservation == s.reservations.end() || mapping_at(s, address) != s.mappings.end())
    return false;
  return reservation->second.ever_mapped[(address - reservation->first) / kVmmGranularity];
}

bool vmm_range_accessible(uint64_t address, uint64_t size, bool write) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (uint64_t at = address; at < address + size;
       at = (at / kVmmGranularity + 1) * kVmmGranularity) {
    auto it = mapping_at(s, at);
    if (it == s.mappings.end()) return false;
    const Granule& granule = it->second.access[(at - it->first) / kVmmGranularity];
    if (((write ? granule.write : granule.read) & kAnyDevice) == 0) return false;
  }
  return true;
}

}  // namespace simcuda
