#include "core/copy_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/context.h"
#include "core/device_memory.h"
#include "core/driver.h"
#include "core/kernel_fault.h"
#include "core/remap_check.h"
#include "core/vmm.h"

namespace simcuda {

MemoryPlace place_of(uint64_t address) {
  Driver& driver = *Driver::instance();
  if (driver.addresses().contains(address)) return MemoryPlace::kDevice;
  const std::optional<Allocation> found = driver.allocations().find_containing(address);
  return found && found->host_located ? MemoryPlace::kPinnedHost : MemoryPlace::kPageableHost;
}

CUresult check_range(uint64_t address, uint64_t size, Access access) {
  if (address == 0 || size > std::numeric_limits<uint64_t>::max() - address)
    return CUDA_ERROR_INVALID_VALUE;
  const AllocationRegistry& registry = Driver::instance()->allocations();
  const uint64_t end = address + size;
  for (uint64_t cursor = address;;) {
    const std::optional<Allocation> found = registry.find_containing(cursor);
    if (!found) {
      check_touch_during_remap("a copy or memset (refused at the call)", cursor);
      return CUDA_ERROR_INVALID_VALUE;
    }
    // A VMM mapping is usable up to its mapped end; other allocations up to the size asked for.
    const bool vmm = found->kind == MemoryKind::kVmmMapping;
    const uint64_t limit = found->base + (vmm ? found->mapped : found->size);
    if (cursor >= limit) return CUDA_ERROR_INVALID_VALUE;
    // A registered mapping is readable by devices, but it may be read-only (Note [VMM model]):
    // the shadow view is then PROT_READ, and writing through it would fault.
    if (vmm && access == Access::kWrite &&
        !vmm_range_accessible(cursor, std::min(end, limit) - cursor, /*write=*/true))
      return CUDA_ERROR_INVALID_VALUE;
    if (end <= limit) return CUDA_SUCCESS;
    if (!vmm) return CUDA_ERROR_INVALID_VALUE;
    cursor = limit;
  }
}

CUresult check_host_pointer(uint64_t address, uint64_t size, Access access, MemoryPlace* place) {
  if (address == 0) return CUDA_ERROR_INVALID_VALUE;
  *place = place_of(address);
  if (*place == MemoryPlace::kDevice) return check_range(address, size, access);
  // Memory only partly page-locked is staged by the driver like pageable memory.
  if (*place == MemoryPlace::kPinnedHost && check_range(address, size, access) != CUDA_SUCCESS)
    *place = MemoryPlace::kPageableHost;
  return CUDA_SUCCESS;
}

std::shared_ptr<std::vector<unsigned char>> stage_source(Copy2D& copy) {
  auto staging = std::make_shared<std::vector<unsigned char>>(copy.width * copy.height);
  for (uint64_t row = 0; row < copy.height; ++row)
    std::memcpy(staging->data() + row * copy.width, device_view(copy.src + row * copy.src_pitch),
                copy.width);
  copy.src = reinterpret_cast<uint64_t>(staging->data());
  copy.src_pitch = copy.width;
  return staging;
}

namespace {

// The bytes of a copy or memset move under run_guarded (Note [Copy faults] in copy_engine.h).
// A fault leaves the body by siglongjmp: it may hold no lock and own nothing with a destructor.
struct GuardedCopy {
  Copy2D copy;
};

void copy_rows(void* data) {
  const Copy2D& copy = static_cast<GuardedCopy*>(data)->copy;
  for (uint64_t row = 0; row < copy.height; ++row)
    std::memmove(device_view(copy.dst + row * copy.dst_pitch),
                 device_view(copy.src + row * copy.src_pitch), copy.width);
}

template <typename Element>
void fill_row(void* row, uint64_t count, uint32_t value) {
  std::fill_n(static_cast<Element*>(row), count, static_cast<Element>(value));
}

struct GuardedFill {
  Fill fill;
};

void fill_rows(void* data) {
  const Fill& fill = static_cast<GuardedFill*>(data)->fill;
  for (uint64_t row = 0; row < fill.height; ++row) {
    void* start = device_view(fill.dst + row * fill.pitch);
    switch (fill.element_size) {
      case 1:
        fill_row<uint8_t>(start, fill.width, fill.value);
        break;
      case 2:
        fill_row<uint16_t>(start, fill.width, fill.value);
        break;
      default:
        fill_row<uint32_t>(start, fill.width, fill.value);
        break;
    }
  }
}

// Runs body(data) guarded; false when it faulted on device memory, after poisoning `context`
// with CUDA_ERROR_ILLEGAL_ADDRESS (the first sticky error stays, as for kernels).
bool run_or_poison(Context& context, const char* what, void (*body)(void*), void* data) {
  void* fault_address = nullptr;
  if (run_guarded(body, data, &fault_address)) return true;
  uint64_t address = reinterpret_cast<uint64_t>(fault_address);
  const AddressSpace& addresses = Driver::instance()->addresses();
  if (!addresses.contains(address) && !addresses.in_shadow(address)) {
    // Host memory (a garbage or unmapped pageable pointer): the driver copies pageable memory on
    // the CPU, where such a pointer crashes the process. Run the work again unguarded, so that it
    // faults the same way, through the handlers installed before simcuda's (step 3 of Note
    // [Kernel faults]).
    body(data);
    return true;  // the memory became accessible meanwhile
  }
  if (addresses.in_shadow(address)) address -= AddressSpace::kSpan;  // the program's address
  // The driver reports nothing more; a line on stderr saves a debugging session.
  std::fprintf(stderr,
               "simcuda: %s touched inaccessible address 0x%llx: CUDA_ERROR_ILLEGAL_ADDRESS (the "
               "context is now unusable)\n",
               what, static_cast<unsigned long long>(address));
  check_touch_during_remap(what, address);
  CUresult expected = CUDA_SUCCESS;
  context.sticky_error.compare_exchange_strong(expected, CUDA_ERROR_ILLEGAL_ADDRESS);
  return false;
}

bool poisoned(const Context& context) {
  return context.sticky_error.load(std::memory_order_relaxed) != CUDA_SUCCESS;
}

struct GuardedValue {
  uint64_t address = 0;
  uint64_t value = 0;
  unsigned bytes = 0;
};

void write_value(void* data) {
  const auto& write = *static_cast<GuardedValue*>(data);
  std::memcpy(device_view(write.address), &write.value, write.bytes);  // the low bytes for 4
}

void read_value(void* data) {
  auto& read = *static_cast<GuardedValue*>(data);
  std::memcpy(&read.value, device_view(read.address), read.bytes);  // the low bytes for 4
}

// How often a waiting stream reads its value again (Note [Waiting for a value]).
constexpr std::chrono::microseconds kValuePoll{50};

// Whether `seen` meets the wait's `condition` against `value`, compared as `bytes` wide.
bool value_meets(uint64_t seen, uint64_t value, unsigned bytes, unsigned condition) {
  const uint64_t mask = bytes == 4 ? 0xFFFF'FFFFull : ~0ull;
  seen &= mask;
  value &= mask;
  switch (condition) {
    case CU_STREAM_WAIT_VALUE_GEQ:  // cyclic: the difference, as a signed number, is not negative
      return bytes == 4 ? static_cast<int32_t>(static_cast<uint32_t>(seen - value)) >= 0
                        : static_cast<int64_t>(seen - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return seen == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (seen & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return (~(seen | value) & mask) != 0;
    default:
      return false;
  }
}

// What cuStreamWriteValue last wrote at each address, and when, on the modeled clock.
struct ValueWrite {
  uint64_t value;
  double when;
};
std::mutex value_writes_mutex;
std::unordered_map<uint64_t, ValueWrite> value_writes;  // guarded by value_writes_mutex

void note_value_written(uint64_t address, uint64_t value, double when) {
  const std::lock_guard lock(value_writes_mutex);
  value_writes[address] = {value, when};
}

// When `seen` was written at `address` by a cuStreamWriteValue; 0 when something else wrote it.
double value_written_at(uint64_t address, uint64_t seen) {
  const std::lock_guard lock(value_writes_mutex);
  const auto found = value_writes.find(address);
  return found != value_writes.end() && found->second.value == seen ? found->second.when : 0.0;
}

}  // namespace

StreamWork copy_work(Context& context, Copy2D copy,
                     std::shared_ptr<std::vector<unsigned char>> staging) {
  install_fault_handler();  // here, on the program's thread, rather than lazily on a worker
  return [&context, copy, staging = std::move(staging)] {
    // A context that faulted runs no more work, as on a GPU.
    if (poisoned(context)) return 0.0;
    GuardedCopy guarded{copy};
    if (!run_or_poison(context, "copy", copy_rows, &guarded)) return 0.0;
    if (place_of(copy.src) == MemoryPlace::kPageableHost &&
        place_of(copy.dst) == MemoryPlace::kPageableHost)
      return 0.0;
    const uint64_t bytes = copy.width * copy.height;
    Device& device = *context.device;
    return account_access(device, Engine::kCopy, copy.src, bytes, Access::kRead) +
           account_access(device, Engine::kCopy, copy.dst, bytes, Access::kWrite);
  };
}

Footprint copy_footprint(const Copy2D& copy) {
  return {"copy",
          {{copy.dst, region_extent(copy.dst_pitch, copy.width, copy.height)},
           {copy.src, region_extent(copy.src_pitch, copy.width, copy.height)}}};
}

Footprint fill_footprint(const Fill& fill) {
  return {"memset",
          {{fill.dst, region_extent(fill.pitch, fill.width * fill.element_size, fill.height)}}};
}

StreamWork fill_work(Context& context, Fill fill) {
  install_fault_handler();
  return [&context, fill] {
    if (poisoned(context)) return 0.0;
    GuardedFill guarded{fill};
    if (!run_or_poison(context, "memset", fill_rows, &guarded)) return 0.0;
    return account_access(*context.device, Engine::kKernel, fill.dst,
                          fill.width * fill.element_size * fill.height, Access::kWrite);
  };
}

StreamWork value_write_work(Context& context, uint64_t address, uint64_t value, unsigned bytes) {
  install_fault_handler();
  return [&context, address, value, bytes] {
    if (poisoned(context)) return 0.0;
    // Told before the value can be seen, so that a wait that sees it finds when it landed.
    const double took =
        account_access(*context.device, Engine::kKernel, address, bytes, Access::kWrite);
    note_value_written(address, value, running_work_start() + took);
    GuardedValue write{address, value, bytes};
    if (!run_or_poison(context, "stream write value", write_value, &write)) return 0.0;
    return took;
  };
}

StreamWork value_wait_work(Context& context, uint64_t address, uint64_t value, unsigned bytes,
                           unsigned condition) {
  install_fault_handler();
  return [&context, address, value, bytes, condition] {
    GuardedValue read{address, 0, bytes};
    for (;;) {
      if (poisoned(context) || context.ending.load(std::memory_order_acquire)) return 0.0;
      if (!run_or_poison(context, "stream wait value", read_value, &read)) return 0.0;
      if (value_meets(read.value, value, bytes, condition)) break;
      std::this_thread::sleep_for(kValuePoll);
    }
    return std::max(0.0, value_written_at(address, read.value) - running_work_start());
  };
}

}  // namespace simcuda
