// Residency of managed pages (Note [Managed pages] in managed.h).
//
// Note [Managed locking]
// One mutex guards every page. The host-fault handler takes it inside a SIGSEGV handler, which
// POSIX does not bless; it is safe here because the only code that holds the mutex is this
// file's bookkeeping, which never touches a managed page through its host view (simcuda's copies
// and kernels use the shadow view), so the faulting thread never holds it, and because the
// handler's path allocates nothing (the LRU lists are intrusive). Device::charge may call the
// reclaimer while a migration holds the mutex; `thread_holds_lock` lets it re-enter.
#include "core/managed.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/host_clock.h"
#include "core/kernel_fault.h"
#include "core/stream.h"

namespace simcuda {
namespace {

// Modeled cost of one GPU page-fault round trip (fault buffer, CPU-side servicing, TLB
// invalidation), paid once per 2 MiB page migrated on access; prefetches do not pay it.
constexpr double kFaultBatchLatencySeconds = 20e-6;

struct Page {
  uint64_t address = 0;
  uint64_t bytes = 0;
  int location = kHostLocation;
  bool host_copy = false;  // read-mostly page on a device whose host view stays readable
  bool read_mostly = false;
  int preferred = kNoLocation;
  int last_prefetch = kNoLocation;
  // When the prefetch that brought it to its device ends, in modeled seconds (Note [Waiting for
  // a prefetch]); 0 for a page that came by a fault, whose kernel paid for it.
  double arrives_at = 0.0;
  bool populated = false;  // made somewhere by now (Note [Pages before their first touch])
  uint64_t accessed_by = 0;
  uint64_t remote_mapped = 0;  // devices that mapped this host page for zero-copy access
  Page* older = nullptr;       // the LRU list of the device the page is on
  Page* newer = nullptr;
};

struct ManagedRange {
  uint64_t base = 0;
  uint64_t mapped = 0;
  std::vector<Page> pages;  // never resized: the LRU lists point into it
};

struct Lru {
  Page* oldest = nullptr;
  Page* newest = nullptr;
};

struct State {
  std::mutex mutex;
  std::map<uint64_t, std::unique_ptr<ManagedRange>> ranges;
  std::vector<Lru> lru;  // by device ordinal
};

// Created at the first cuMemAllocManaged and never destroyed (exit-time frees, the handler).
std::atomic<State*> the_state{nullptr};
std::once_flag state_once;
thread_local bool thread_holds_lock = false;
// Bytes the reclaimer copied to the host for the migration or prefetch this thread is making
// (Note [Evictions take link time]).
thread_local uint64_t evicted_for_this_thread = 0;

State& state() {
  std::call_once(state_once, [] {
    auto* created = new State();
    created->lru.resize(static_cast<size_t>(Driver::instance()->device_count()));
    the_state.store(created, std::memory_order_release);
  });
  return *the_state.load(std::memory_order_acquire);
}

class Locked {
 public:
  explicit Locked(State& state) : lock_(state.mutex) { thread_holds_lock = true; }
  ~Locked() { thread_holds_lock = false; }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

uint64_t bit(int location) {
  return location == kHostLocation ? uint64_t{1} << kHostBit : uint64_t{1} << location;
}

void unlink(Lru& lru, Page& page) {
  (page.older != nullptr ? page.older->newer : lru.oldest) = page.newer;
  (page.newer != nullptr ? page.newer->older : lru.newest) = page.older;
  page.older = page.newer = nullptr;
}

void push_newest(Lru& lru, Page& page) {
  page.older = lru.newest;
  page.newer = nullptr;
  (lru.newest != nullptr ? lru.newest->newer : lru.oldest) = &page;
  lru.newest = &page;
}

ManagedRange* range_containing(State& state, uint64_t address) {
  auto it = state.ranges.upper_bound(address);
  if (it == state.ranges.begin()) return nullptr;
  --it;
  return address - it->first < it->second->mapped ? it->second.get() : nullptr;
}

// Calls `visit(page, overlap)` for each page overlapping [address, address + size).
template <typename Visit>
void for_pages(ManagedRange& range, uint64_t address, uint64_t size, Visit visit) {
  if (size == 0 || address < range.base) return;
  const uint64_t end = std::min(address + size, range.base + range.mapped);
  for (uint64_t at = address; at < end;) {
    Page& page = range.pages[(at - range.base) / kManagedPage];
    const uint64_t stop = std::min(end, page.address + page.bytes);
    visit(page, stop - at);
    at = stop;
  }
}

// Whether a kernel of `device` reaches `page` through a mapping to where the page lives instead
// of migrating it (Note [Managed pages]): the page is on the host or on another device (every
// pair of simcuda's devices can access each other as peers), and it is either in its preferred
// location or accessed-by `device`.
bool mapped_where_it_lives(const Page& page, int device) {
  if (page.location == device) return false;
  return page.preferred == page.location || (page.accessed_by & bit(device)) != 0;
}

double link_seconds(uint64_t bytes) {
  return static_cast<double>(bytes) / Driver::instance()->config().cost.link_bytes_per_second;
}

// Note [Pages before their first touch]
// A managed page has no memory behind it until something touches it: the driver makes it where
// it is first touched, or where a prefetch sends it, and moves no data to do so. simcuda's pages
// live in a memfd whose holes are punched at every free (physical_memory.cpp), and any access, a
// host one through the host view or a copy's or a kernel's through the shadow view, leaves the
// file's pages resident: mincore on the shadow view tells whether anything has touched a page,
// with nothing in the program's way (a read(2) into a fresh managed buffer works as on a GPU).
// Before this, a prefetch of a block no one had written was charged the link time of its every
// byte, as the prefetch mover's new blocks were. A kernel's first touch of a page still pays a
// fault. A page the shim's memory pressure swapped out would look untouched: simcuda errs fast
// there, never on a test's scale.
bool touched(const Page& page) {
  void* shadow = Driver::instance()->addresses().shadow(page.address);
  std::array<unsigned char, kManagedPage / 4096> resident{};
  if (mincore(shadow, page.bytes, resident.data()) != 0) return true;  // unknown: it has data
  const std::size_t pages = (page.bytes + 4095) / 4096;
  return std::any_of(resident.begin(), resident.begin() + static_cast<std::ptrdiff_t>(pages),
                     [](unsigned char byte) { return (byte & 1) != 0; });
}

// Whether the driver would have made `page` by now (Note [Pages before their first touch]).
bool made(Page& page) {
  if (!page.populated) page.populated = touched(page);
  return page.populated;
}

// Moves a device-resident page back to the host. Async-signal-safe enough for the fault
// handler: pointer updates, atomics and mprotect. Returns the bytes that crossed the link
// (none for a read-mostly page, whose host copy is current).
uint64_t move_to_host(State& state, Page& page) {
  if (page.location == kHostLocation) return 0;
  Device* device = Driver::instance()->device(page.location);
  unlink(state.lru[static_cast<size_t>(page.location)], page);
  device->uncharge(page.bytes);
  const uint64_t moved = page.host_copy ? 0 : page.bytes;
  page.location = kHostLocation;
  page.host_copy = false;
  Driver::instance()->addresses().set_host_access(page.address, page.bytes, true);
  device->counters().link_bytes_migrations.fetch_add(moved, std::memory_order_relaxed);
  return moved;
}

// Makes `page` resident on `device`, charging its VRAM (which may evict this device's older
// pages). False when even eviction cannot make room: the page stays where it is.
bool move_to_device(State& state, Device& device, Page& page) {
  Lru& lru = state.lru[static_cast<size_t>(device.ordinal())];
  if (page.location == device.ordinal()) {  // a touch: now the most recently used
    unlink(lru, page);
    push_newest(lru, page);
    return true;
  }
  if (!device.charge(page.bytes)) return false;
  if (page.location != kHostLocation) {
    Device* from = Driver::instance()->device(page.location);
    unlink(state.lru[static_cast<size_t>(page.location)], page);
    from->uncharge(page.bytes);
  }
  page.location = device.ordinal();
  push_newest(lru, page);
  page.host_copy = page.read_mostly;
  if (page.host_copy)
    mprotect(reinterpret_cast<void*>(page.address), page.bytes, PROT_READ);
  else
    Driver::instance()->addresses().set_host_access(page.address, page.bytes, false);
  // Note [Pages before their first touch]: a page never made is made where it is wanted.
  if (made(page))
    device.counters().link_bytes_migrations.fetch_add(page.bytes, std::memory_order_relaxed);
  page.populated = true;
  return true;
}

// Note [Evictions take link time]
// When the driver evicts managed pages for room, it copies each written one back to the host
// before the room is used: the fault, prefetch or allocation that needed the room waits for the
// copy. Evictions were free here, so a job whose managed memory outgrew VRAM (`managed` mode
// with managed_location = "device" or "none", or the prefetch mover past the card's free memory)
// paid only the inbound half of every swap. Now a kernel's migration and a prefetch pay link time
// for what they evicted, and so does the host clock of a call that allocated device memory over
// evictable pages. The eviction is assumed not to overlap the migration that waits for its room.

// The Device reclaimer: evicts `device`'s managed pages, least recently used first, until
// `bytes` are free. Re-entered from move_to_device's charge with the lock already held.
uint64_t reclaim(Device& device, uint64_t bytes) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex, std::defer_lock);
  const bool reentered = thread_holds_lock;
  if (!reentered) {
    lock.lock();
    thread_holds_lock = true;
  }
  uint64_t freed = 0;
  uint64_t copied = 0;
  Lru& lru = s.lru[static_cast<size_t>(device.ordinal())];
  while (freed < bytes && lru.oldest != nullptr) {
    Page& victim = *lru.oldest;
    freed += victim.bytes;
    copied += move_to_host(s, victim);
    device.counters().managed_evictions.fetch_add(1, std::memory_order_relaxed);
  }
  if (reentered) {
    evicted_for_this_thread += copied;  // the migration or prefetch charges it
  } else {
    thread_holds_lock = false;
    lock.unlock();
    host_clock_advance(link_seconds(copied));  // an allocation waited for the copies
  }
  return freed;
}

// Bytes the reclaimer copied to the host for this thread since the last call.
uint64_t take_evicted_for_this_thread() { return std::exchange(evicted_for_this_thread, 0); }

void install_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    Driver& driver = *Driver::instance();
    for (int ordinal = 0; ordinal < driver.device_count(); ++ordinal)
      driver.device(ordinal)->set_reclaimer(reclaim);
    set_host_fault_handler(handle_managed_host_fault);
  });
}

}  // namespace

CUresult allocate_managed(Context& context, uint64_t size, unsigned int flags, CUdeviceptr* out) {
  State& s = state();
  install_hooks();
  Allocation allocation;
  const CUresult result = map_new_memory(
      *context.device,
      {.size = size, .kind = MemoryKind::kManaged, .charge_vram = false, .host_accessible = true},
      allocation);
  if (result != CUDA_SUCCESS) return result;
  allocation.context = &context;
  allocation.flags = flags;
  auto range = std::make_unique<ManagedRange>();
  range->base = allocation.base;
  range->mapped = allocation.mapped;
  range->pages.resize((allocation.mapped + kManagedPage - 1) / kManagedPage);
  for (size_t i = 0; i < range->pages.size(); ++i) {
    range->pages[i].address = allocation.base + i * kManagedPage;
    range->pages[i].bytes = std::min(kManagedPage, allocation.mapped - i * kManagedPage);
  }
  {
    Locked lock(s);
    s.ranges.emplace(allocation.base, std::move(range));
  }
  Driver::instance()->allocations().add(allocation);
  *out = allocation.base;
  return CUDA_SUCCESS;
}

void release_managed(const Allocation& managed) {
  State& s = state();
  std::unique_ptr<ManagedRange> range;
  {
    Locked lock(s);
    auto it = s.ranges.find(managed.base);
    if (it != s.ranges.end()) {
      range = std::move(it->second);
      s.ranges.erase(it);
      for (Page& page : range->pages) {
        if (page.location == kHostLocation) continue;
        unlink(s.lru[static_cast<size_t>(page.location)], page);
        Driver::instance()->device(page.location)->uncharge(page.bytes);
      }
    }
  }
  unmap_memory(managed, 0);
}

bool handle_managed_host_fault(void* address) {
  State* s = the_state.load(std::memory_order_acquire);
  Driver* driver = Driver::instance();
  const auto at = reinterpret_cast<uint64_t>(address);
  if (s == nullptr || driver == nullptr || !driver->addresses().contains(at)) return false;
  std::lock_guard lock(s->mutex);  // Note [Managed locking]
  ManagedRange* range = range_containing(*s, at);
  if (range == nullptr) return false;
  Page& page = range->pages[(at - range->base) / kManagedPage];
  if (page.location == kHostLocation) {
    // Another thread's fault brought it back first; make sure the retry succeeds.
    driver->addresses().set_host_access(page.address, page.bytes, true);
    return true;
  }
  driver->device(page.location)->counters().managed_faults.fetch_add(1, std::memory_order_relaxed);
  move_to_host(*s, page);
  return true;
}

double migrate_managed_for_device_access(Device& device, const Allocation& managed,
                                         uint64_t address, uint64_t size) {
  State& s = state();
  Locked lock(s);
  auto it = s.ranges.find(managed.base);
  if (it == s.ranges.end()) return 0.0;  // freed while the kernel was queued
  uint64_t migrated = 0, faults = 0, zero_copy = 0;
  (void)take_evicted_for_this_thread();
  const uint64_t me = bit(device.ordinal());
  for_pages(*it->second, address, size, [&](Page& page, uint64_t overlap) {
    if (mapped_where_it_lives(page, device.ordinal())) {
      // The kernel reads it over the link (the peer link for another device's page). Without
      // accessed-by advice the first access faults to establish the mapping.
      zero_copy += overlap;
      if ((page.accessed_by & me) == 0 && (page.remote_mapped & me) == 0) {
        page.remote_mapped |= me;
        ++faults;
      }
      return;
    }
    const bool resident = page.location == device.ordinal();
    const bool has_data = made(page);
    if (move_to_device(s, device, page)) {
      if (!resident) {
        page.arrives_at = 0.0;
        if (has_data) migrated += page.bytes;
        ++faults;
        device.counters().managed_faults.fetch_add(1, std::memory_order_relaxed);
      }
    } else {
      zero_copy += overlap;  // VRAM is full of unevictable memory: access it remotely
    }
  });
  device.counters().link_bytes_zero_copy.fetch_add(zero_copy, std::memory_order_relaxed);
  return link_seconds(take_evicted_for_this_thread() + migrated + zero_copy) +
         static_cast<double>(faults) * kFaultBatchLatencySeconds;
}

uint64_t managed_bytes_on_device(const Allocation& managed, uint64_t address, uint64_t size,
                                 int device) {
  State& s = state();
  Locked lock(s);
  auto it = s.ranges.find(managed.base);
  if (it == s.ranges.end()) return 0;
  uint64_t on_device = 0;
  for_pages(*it->second, address, size, [&](Page& page, uint64_t overlap) {
    if (page.location == device) on_device += overlap;
  });
  return on_device;
}

void advise_managed(uint64_t address, uint64_t size, CUmem_advise advice, int location) {
  State& s = state();
  Locked lock(s);
  ManagedRange* range = range_containing(s, address);
  if (range == nullptr) return;
  for_pages(*range, address, size, [&](Page& page, uint64_t) {
    switch (advice) {
      case CU_MEM_ADVISE_SET_READ_MOSTLY:
        page.read_mostly = true;
        if (page.location != kHostLocation && !page.host_copy) {
          page.host_copy = true;  // the duplicate is created
          mprotect(reinterpret_cast<void*>(page.address), page.bytes, PROT_READ);
        }
        break;
      case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
        page.read_mostly = false;
        if (page.host_copy) {
          page.host_copy = false;
          Driver::instance()->addresses().set_host_access(page.address, page.bytes, false);
        }
        break;
      case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        page.preferred = location;
        page.remote_mapped = 0;
        break;
      case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        page.preferred = kNoLocation;
        break;
      case CU_MEM_ADVISE_SET_ACCESSED_BY:
        page.accessed_by |= bit(location);
        break;
      case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
        page.accessed_by &= ~bit(location);
        page.remote_mapped &= ~bit(location);
        break;
      default:
        break;
    }
  });
}

double prefetch_managed(uint64_t address, uint64_t size, int location) {
  State& s = state();
  Locked lock(s);
  ManagedRange* range = range_containing(s, address);
  if (range == nullptr) return 0.0;  // freed before the stream got here
  Device* device = location == kHostLocation ? nullptr : Driver::instance()->device(location);
  uint64_t moved = 0;
  (void)take_evicted_for_this_thread();
  std::vector<Page*> arriving;
  for_pages(*range, address, size, [&](Page& page, uint64_t) {
    if (device == nullptr) {
      // A read-mostly page on a device has its read-only host copy, which is all a prefetch to
      // the host makes of it (cuMemAdvise's documentation): the device keeps its copy.
      if (!page.host_copy) moved += move_to_host(s, page);
    } else if (page.location != location) {
      const bool has_data = made(page);
      if (!move_to_device(s, *device, page)) return;
      if (has_data) moved += page.bytes;
      arriving.push_back(&page);
    }
  });
  const double seconds = link_seconds(take_evicted_for_this_thread() + moved);
  // Note [Waiting for a prefetch]: the pages are there once the whole prefetch is.
  for (Page* page : arriving) page->arrives_at = running_work_start() + seconds;
  return seconds;
}

// Note [The last prefetch location]
// cuMemRangeGetAttribute's LAST_PREFETCH_LOCATION is, as its documentation says, the location the
// program last asked a prefetch of the range to go to, with no indication of whether that
// prefetch has completed or even begun. So it changes at the cuMemPrefetchAsync call, not when
// the stream gets to the prefetch: simcuda changed it when the prefetch ran, so a test could
// read it as "the pages are there" and pass where a GPU would show them still in flight. A
// prefetch captured into a graph is asked for each time the graph runs it.
void note_prefetch_request(uint64_t address, uint64_t size, int location) {
  State& s = state();
  Locked lock(s);
  ManagedRange* range = range_containing(s, address);
  if (range == nullptr) return;
  for_pages(*range, address, size, [&](Page& page, uint64_t) { page.last_prefetch = location; });
}

// Note [Waiting for a prefetch]
// The stream workers run work in real time but charge it on modeled clocks, so a prefetch may
// have run before a kernel that, in modeled time, starts before the prefetch ends: a kernel on
// another stream that nothing ordered after it. On a GPU that kernel would find the pages in
// flight and wait for them (or fault them over itself); charging it HBM time for them from its
// start, as simcuda did, made an unordered prefetch free and hid a launch that forgot to wait.
// Each page a prefetch brings to a device records when that prefetch ends, and a kernel that
// touches it starts no earlier (launch.cpp). A graph's nodes each start where the one before
// ended (running_work_took() in core/stream.h), so a node waits only for what is left.
double managed_arrival(const Allocation& managed, uint64_t address, uint64_t size, int device) {
  State& s = state();
  Locked lock(s);
  auto it = s.ranges.find(managed.base);
  if (it == s.ranges.end()) return 0.0;
  double latest = 0.0;
  for_pages(*it->second, address, size, [&](Page& page, uint64_t) {
    if (page.location == device) latest = std::max(latest, page.arrives_at);
  });
  return latest;
}

ManagedRangeAdvice managed_range_advice(uint64_t address, uint64_t size) {
  State& s = state();
  Locked lock(s);
  ManagedRangeAdvice advice;
  ManagedRange* range = range_containing(s, address);
  if (range == nullptr) return advice;
  bool first = true;
  for_pages(*range, address, size, [&](Page& page, uint64_t) {
    advice.read_mostly = advice.read_mostly && page.read_mostly;
    if (first) {
      advice.preferred = page.preferred;
      advice.last_prefetch = page.last_prefetch;
      advice.accessed_by = page.accessed_by;
      first = false;
      return;
    }
    if (advice.preferred != page.preferred) advice.preferred = kNoLocation;
    if (advice.last_prefetch != page.last_prefetch) advice.last_prefetch = kNoLocation;
    advice.accessed_by &= page.accessed_by;
  });
  return advice;
}

}  // namespace simcuda
