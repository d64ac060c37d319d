// The ledger's hot path (admit, on_allocated, cancel, on_freed) and its bookkeeping. The texts it
// writes for people are in ledger_report.cpp.
#include "core/ledger.h"

#include <algorithm>
#include <mutex>

namespace vramspill::core {

Ledger::DeviceState* Ledger::state(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return &devices_[static_cast<std::size_t>(device)];
}

const Ledger::DeviceState* Ledger::state(int device) const noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return &devices_[static_cast<std::size_t>(device)];
}

void Ledger::set_device(int device, uint64_t total_bytes, uint64_t limit_bytes) noexcept {
  DeviceState* d = state(device);
  if (d == nullptr) {
    note_internal_error();
    return;
  }
  d->total.store(total_bytes, kRelaxed);
  d->limit.store(limit_bytes, kRelaxed);
  d->configured.store(true, kRelaxed);
  if (MemoryEvents* told = events()) told->device_configured(device, total_bytes, limit_bytes);
}

Admission Ledger::admit(int device, Route route, uint64_t bytes,
                        uint64_t pool_free_reserved, uint64_t pool_room_under_cap) noexcept {
  Admission admission;
  admission.device = device;
  admission.route = route;
  admission.requested_bytes = bytes;
  DeviceState* d = state(device);
  if (d == nullptr) {
    note_internal_error();
    return admission;
  }
  uint64_t needed = bytes;
  if (is_pool_route(route)) {
    admission.pool_free_reserved = pool_free_reserved;
    needed = bytes > pool_free_reserved ? pool_growth(bytes, pool_room_under_cap) : 0;
  }
  // Host memory (the host budget guards it), or a tiered block (its granules were taken).
  if (is_spill_route(route) || route == Route::kTiered) needed = 0;
  if (needed == 0) return admission;

  // Note [Reservation protocol]: the check and the reservation are one compare-and-swap.
  const uint64_t limit = d->limit.load(kRelaxed);
  uint64_t held = d->held.load(kRelaxed);
  do {
    if (needed > limit || held > limit - needed) {
      try {
        admission.refusal = refusal_text(device, route, bytes, pool_free_reserved, needed);
        admission.admitted = false;
        d->over_budget.fetch_add(1, kRelaxed);
        if (MemoryEvents* told = events()) told->refused(device, route, bytes);
        return admission;
      } catch (...) {
        // Without the explanation the refusal would be a mystery OOM: fail open instead.
        note_internal_error();
        d->held.fetch_add(needed, kRelaxed);
        admission.reserved_bytes = needed;
        return admission;
      }
    }
  } while (!d->held.compare_exchange_weak(held, held + needed, kRelaxed, kRelaxed));
  admission.reserved_bytes = needed;
  return admission;
}

void Ledger::on_allocated(const Admission& admission, uint64_t key, uint64_t bytes) noexcept {
  DeviceState* d = state(admission.device);
  if (d == nullptr) return;  // admit() counted the out-of-range device already
  if (!admission.admitted || key == 0) {
    // A refused request has nothing to settle; a null key cannot be told apart from an empty
    // slot (Note [Allocation table layout]), so that allocation goes untracked.
    note_internal_error();
    if (admission.admitted) cancel(admission);
    return;
  }
  const uint64_t hash = AllocationTable::hash(key_space(admission.route), key);
  Shard& s = shard(hash);
  Allocation stale;
  bool replaced = false;
  try {
    const std::lock_guard guard(s.lock);
    replaced = s.table.insert(key, bytes, admission.device, admission.route, hash, stale);
    ++s.counts[static_cast<std::size_t>(admission.device)][route_index(admission.route)]
          .allocations;
    if (replaced) {
      ++s.counts[static_cast<std::size_t>(stale.device)][route_index(stale.route)].frees;
    }
  } catch (...) {
    // The table could not grow: leave this allocation untracked (its free will be forwarded as
    // unknown) and give its budget back, so the books stay balanced.
    note_internal_error();
    cancel(admission);
    return;
  }
  if (replaced) {
    missed_frees_.fetch_add(1, kRelaxed);
    release(stale);
  }
  // A tiered block is told by tiered placement (Note [A tiered block in the trace] in
  // placement/tiered_placement.cpp).
  if (MemoryEvents* told = events(); told != nullptr && admission.route != Route::kTiered)
    told->allocated(
        {.key = key, .bytes = bytes, .device = admission.device, .route = admission.route});

  const uint64_t live = d->live[route_index(admission.route)].fetch_add(bytes, kRelaxed) + bytes;
  if (is_spill_route(admission.route)) raise(d->live_peak[route_index(admission.route)], live);
  // Pool blocks are counted through their pool's reserved figure, which set_pool_reserved has
  // already raised: the reservation only bridged the driver call. Spilled blocks take no device
  // memory at all.
  const uint64_t counted = counts_against_device(admission.route) ? bytes : 0;
  uint64_t held = 0;
  if (counted > admission.reserved_bytes) {
    held = d->held.fetch_add(counted - admission.reserved_bytes, kRelaxed) + counted -
           admission.reserved_bytes;
  } else if (counted < admission.reserved_bytes) {
    subtract(d->held, admission.reserved_bytes - counted);
    held = d->held.load(kRelaxed);
  } else {
    held = d->held.load(kRelaxed);
  }
  raise_peak(*d, held);
}

void Ledger::cancel(const Admission& admission) noexcept {
  DeviceState* d = state(admission.device);
  if (d == nullptr || !admission.admitted || admission.reserved_bytes == 0) return;
  subtract(d->held, admission.reserved_bytes);
}

void Ledger::note_over_budget_served(int device) noexcept {
  if (DeviceState* d = state(device)) d->over_budget_served.fetch_add(1, kRelaxed);
}

std::optional<Allocation> Ledger::forget(uint64_t key, KeySpace space) noexcept {
  // One named result, filled in place (Note [Allocation table layout] on store forwarding).
  std::optional<Allocation> result;
  if (key == 0) return result;
  const uint64_t hash = AllocationTable::hash(space, key);
  Shard& s = shard(hash);
  Allocation& erased = result.emplace();
  bool found = false;
  {
    const std::lock_guard guard(s.lock);
    found = s.table.erase(space, key, hash, erased);
    if (found) {
      ++s.counts[static_cast<std::size_t>(erased.device)][route_index(erased.route)].frees;
    }
  }
  if (!found) result.reset();
  return result;
}

std::optional<Allocation> Ledger::find(uint64_t key, KeySpace space) const noexcept {
  std::optional<Allocation> result;
  if (key == 0) return result;
  const uint64_t hash = AllocationTable::hash(space, key);
  const Shard& s = shard(hash);
  Allocation& found = result.emplace();
  bool present = false;
  {
    const std::lock_guard guard(s.lock);
    present = s.table.find(space, key, hash, found);
  }
  if (!present) result.reset();
  return result;
}

void Ledger::release_forgotten(const Allocation& entry) noexcept { release(entry); }

void Ledger::reinstate(const Allocation& entry) noexcept {
  const uint64_t hash = AllocationTable::hash(entry.space(), entry.key);
  Shard& s = shard(hash);
  bool handed_out_again = false;
  try {
    const std::lock_guard guard(s.lock);
    Allocation live;
    // The key was handed out again meanwhile: the driver did free it after all, and the entry
    // there now is the live allocation's.
    handed_out_again = s.table.find(entry.space(), entry.key, hash, live);
    if (!handed_out_again) {
      Allocation unused;
      s.table.insert(entry.key, entry.bytes, entry.device, entry.route, hash, unused);
      --s.counts[static_cast<std::size_t>(entry.device)][route_index(entry.route)].frees;
    }
  } catch (...) {
    // The table could not grow: the allocation stays untracked, so its bytes must not stay held.
    note_internal_error();
    release(entry);
    return;
  }
  if (handed_out_again) {
    missed_frees_.fetch_add(1, kRelaxed);
    // Untold: the trace has the key's new allocation already, which replaces it there too.
    uncount(entry);
  }
}

std::optional<Allocation> Ledger::on_freed(uint64_t key, KeySpace space) noexcept {
  std::optional<Allocation> result = forget(key, space);
  if (result) release(*result);
  return result;
}

void Ledger::release(const Allocation& entry) noexcept {
  if (!uncount(entry)) return;
  if (MemoryEvents* told = events()) told->freed(entry);
}

bool Ledger::uncount(const Allocation& entry) noexcept {
  DeviceState* d = state(entry.device);
  if (d == nullptr) return false;  // never recorded: on_allocated rejects such devices
  subtract(d->live[route_index(entry.route)], entry.bytes);
  if (counts_against_device(entry.route)) subtract(d->held, entry.bytes);
  return true;
}

void Ledger::subtract(std::atomic<uint64_t>& counter, uint64_t bytes) noexcept {
  uint64_t value = counter.load(kRelaxed);
  while (!counter.compare_exchange_weak(value, value < bytes ? 0 : value - bytes, kRelaxed,
                                        kRelaxed)) {
  }
  if (value < bytes) note_internal_error();  // `value` is what the successful exchange saw
}

void Ledger::raise(std::atomic<uint64_t>& peak, uint64_t value) noexcept {
  uint64_t seen = peak.load(kRelaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, kRelaxed, kRelaxed)) {
  }
}

void Ledger::raise_peak(DeviceState& d, uint64_t held) noexcept {
  uint64_t peak = d.peak.load(kRelaxed);
  while (held > peak) {
    if (d.peak.compare_exchange_weak(peak, held, kRelaxed, kRelaxed)) {
      // The breakdown behind the peak, for the exit summary. Concurrent peaks may interleave
      // their copies; the figures are then each true of some moment near the peak.
      for (std::size_t r = 0; r < kRouteCount; ++r) {
        d.live_at_peak[r].store(d.live[r].load(kRelaxed), kRelaxed);
      }
      d.pool_reserved_at_peak.store(d.pool_reserved.load(kRelaxed), kRelaxed);
      d.tiered_at_peak.store(d.tiered.load(kRelaxed), kRelaxed);
      return;
    }
  }
}

uint64_t Ledger::pool_figure(uint64_t pool_key) const noexcept {
  const std::lock_guard guard(pools_mutex_);
  const auto it = std::find_if(pools_.begin(), pools_.end(),
                               [&](const Pool& pool) { return pool.key == pool_key; });
  return it != pools_.end() ? it->reserved : 0;
}

bool Ledger::take(int device, uint64_t bytes) noexcept {
  DeviceState* d = state(device);
  if (d == nullptr) {
    note_internal_error();
    return false;
  }
  // Note [Reservation protocol]: the check and the addition are one compare-and-swap.
  const uint64_t limit = d->limit.load(kRelaxed);
  uint64_t held = d->held.load(kRelaxed);
  do {
    if (bytes > limit || held > limit - bytes) return false;
  } while (!d->held.compare_exchange_weak(held, held + bytes, kRelaxed, kRelaxed));
  d->tiered.fetch_add(bytes, kRelaxed);
  raise_peak(*d, held + bytes);
  return true;
}

void Ledger::give(int device, uint64_t bytes) noexcept {
  DeviceState* d = state(device);
  if (d == nullptr) {
    note_internal_error();
    return;
  }
  subtract(d->tiered, bytes);
  subtract(d->held, bytes);
}

uint64_t Ledger::room(int device) const noexcept {
  const DeviceState* d = state(device);
  if (d == nullptr) return 0;
  const uint64_t limit = d->limit.load(kRelaxed);
  const uint64_t held = d->held.load(kRelaxed);
  return held >= limit ? 0 : limit - held;
}

void Ledger::set_pool_reserved(int device, uint64_t pool_key, uint64_t reserved_bytes) noexcept {
  DeviceState* d = state(device);
  if (d == nullptr) {
    note_internal_error();
    return;
  }
  try {
    // The mutex orders concurrent reports for one pool, so the deltas applied to the counters
    // replay the list's own sequence of figures.
    const std::lock_guard guard(pools_mutex_);
    uncount_pool_locked(replace_pool_figure_locked(device, pool_key, reserved_bytes));
    d->pool_reserved.fetch_add(reserved_bytes, kRelaxed);
    raise_peak(*d, d->held.fetch_add(reserved_bytes, kRelaxed) + reserved_bytes);
  } catch (...) {
    note_internal_error();  // the list could not grow: this pool's figure stays as it was
  }
}

bool Ledger::settle_pool_growth(Admission& admission, uint64_t pool_key,
                                uint64_t reserved_bytes) noexcept {
  DeviceState* d = state(admission.device);
  if (d == nullptr || !admission.admitted) {
    note_internal_error();
    return true;  // nothing was reserved, so nothing can be settled or refused
  }
  try {
    const std::lock_guard guard(pools_mutex_);
    const auto it = std::find_if(pools_.begin(), pools_.end(),
                                 [&](const Pool& pool) { return pool.key == pool_key; });
    const uint64_t recorded = it != pools_.end() ? it->reserved : 0;
    const uint64_t growth = reserved_bytes > recorded ? reserved_bytes - recorded : 0;
    if (growth > admission.reserved_bytes) {
      // Note [Reservation protocol]: the check and the addition are one compare-and-swap.
      const uint64_t extra = growth - admission.reserved_bytes;
      const uint64_t limit = d->limit.load(kRelaxed);
      uint64_t held = d->held.load(kRelaxed);
      do {
        if (extra > limit || held > limit - extra) {
          admission.refusal =
              refusal_text(admission.device, admission.route, admission.requested_bytes,
                           admission.pool_free_reserved, growth);
          d->over_budget.fetch_add(1, kRelaxed);
          return false;
        }
      } while (!d->held.compare_exchange_weak(held, held + extra, kRelaxed, kRelaxed));
    } else {
      subtract(d->held, admission.reserved_bytes - growth);
    }
    // The growth is in `held` now, in place of the reservation; the rest of the figure's change
    // (the pool may also have shrunk) is a plain replacement.
    replace_pool_figure_locked(admission.device, pool_key, reserved_bytes);
    if (reserved_bytes >= recorded) {
      d->pool_reserved.fetch_add(reserved_bytes - recorded, kRelaxed);
    } else {
      subtract(d->pool_reserved, recorded - reserved_bytes);
      subtract(d->held, recorded - reserved_bytes);
    }
    admission.reserved_bytes = 0;
    raise_peak(*d, d->held.load(kRelaxed));
    return true;
  } catch (...) {
    // The refusal text or the pool list could not be allocated: fail open, as admit() does, and
    // let the next report correct the figure.
    note_internal_error();
    return true;
  }
}

void Ledger::forget_pool(uint64_t pool_key) noexcept {
  const std::lock_guard guard(pools_mutex_);
  // A figure of 0 removes the pool's entry, which allocates nothing.
  uncount_pool_locked(replace_pool_figure_locked(0, pool_key, 0));
}

void Ledger::uncount_pool_locked(const Pool& old) noexcept {
  if (old.reserved == 0) return;
  DeviceState* device = state(old.device);
  subtract(device->pool_reserved, old.reserved);
  subtract(device->held, old.reserved);
}

Ledger::Pool Ledger::replace_pool_figure_locked(int device, uint64_t pool_key,
                                                uint64_t reserved_bytes) {
  Pool old;
  const auto it = std::find_if(pools_.begin(), pools_.end(),
                               [&](const Pool& pool) { return pool.key == pool_key; });
  if (it != pools_.end()) {
    old = *it;
    if (reserved_bytes == 0) {
      *it = pools_.back();
      pools_.pop_back();
    } else {
      *it = Pool{.key = pool_key, .device = device, .reserved = reserved_bytes};
    }
  } else if (reserved_bytes != 0) {
    pools_.push_back(Pool{.key = pool_key, .device = device, .reserved = reserved_bytes});
  }
  return old;
}

MemInfo Ledger::budget_view(int device, uint64_t driver_free,
                            uint64_t driver_total) const noexcept {
  const DeviceState* d = state(device);
  if (d == nullptr || !d->configured.load(kRelaxed)) {
    return {.free_bytes = driver_free, .total_bytes = driver_total};
  }
  const uint64_t limit = d->limit.load(kRelaxed);
  const uint64_t held = d->held.load(kRelaxed);
  const uint64_t total = std::min(limit, driver_total);
  const uint64_t room = held >= limit ? 0 : limit - held;
  return {.free_bytes = std::min({driver_free, room, total}), .total_bytes = total};
}

DeviceSnapshot Ledger::snapshot(int device) const noexcept {
  DeviceSnapshot out;
  out.device = device;
  const DeviceState* d = state(device);
  if (d == nullptr) return out;
  out.configured = d->configured.load(kRelaxed);
  out.total_bytes = d->total.load(kRelaxed);
  out.limit_bytes = d->limit.load(kRelaxed);
  out.held_bytes = d->held.load(kRelaxed);
  out.peak_bytes = d->peak.load(kRelaxed);
  out.pool_reserved_bytes = d->pool_reserved.load(kRelaxed);
  out.pool_reserved_at_peak = d->pool_reserved_at_peak.load(kRelaxed);
  out.tiered_bytes = d->tiered.load(kRelaxed);
  out.tiered_at_peak = d->tiered_at_peak.load(kRelaxed);
  out.over_budget = d->over_budget.load(kRelaxed);
  out.over_budget_served = d->over_budget_served.load(kRelaxed);
  for (std::size_t r = 0; r < kRouteCount; ++r) {
    out.routes[r].live_bytes = d->live[r].load(kRelaxed);
    out.routes[r].bytes_at_peak = d->live_at_peak[r].load(kRelaxed);
    out.routes[r].peak_live_bytes = d->live_peak[r].load(kRelaxed);
  }
  const auto index = static_cast<std::size_t>(device);
  for (const Shard& s : shards_) {
    const std::lock_guard guard(s.lock);
    for (std::size_t r = 0; r < kRouteCount; ++r) {
      const RouteCounts& counts = s.counts[index][r];
      out.routes[r].allocations += counts.allocations;
      out.routes[r].live_count += counts.allocations - counts.frees;
    }
  }
  return out;
}

std::vector<int> Ledger::devices() const noexcept {
  std::vector<int> out;
  try {
    for (int device = 0; device < kMaxDevices; ++device) {
      const DeviceState& d = devices_[static_cast<std::size_t>(device)];
      if (d.configured.load(kRelaxed) || d.peak.load(kRelaxed) != 0 || d.held.load(kRelaxed) != 0 ||
          d.over_budget.load(kRelaxed) != 0) {
        out.push_back(device);
      }
    }
  } catch (...) {
    note_internal_error();
  }
  return out;
}

std::vector<Allocation> Ledger::largest(int device, std::size_t count) const noexcept {
  std::vector<Allocation> top;
  if (count == 0) return top;
  try {
    top.reserve(count + 1);  // before any lock: nothing below allocates
  } catch (...) {
    note_internal_error();
    return top;
  }
  const auto by_size = [](const Allocation& a, const Allocation& b) { return a.bytes > b.bytes; };
  for (const Shard& s : shards_) {
    const std::lock_guard guard(s.lock);
    s.table.for_each([&](const Allocation& entry) {
      if (entry.device != device || is_spill_route(entry.route)) return;
      if (top.size() == count && !by_size(entry, top.back())) return;
      top.insert(std::upper_bound(top.begin(), top.end(), entry, by_size), entry);
      if (top.size() > count) top.pop_back();
    });
  }
  return top;
}

std::vector<Allocation> Ledger::all_of(int device) const noexcept {
  std::vector<Allocation> all;
  for (const Shard& s : shards_) {
    // Room is made outside the shard's lock, as in largest(): nothing allocates under it.
    for (std::size_t room = 0;;) {
      {
        const std::lock_guard guard(s.lock);
        if (all.capacity() - all.size() >= s.table.size()) {
          s.table.for_each([&](const Allocation& entry) {
            if (entry.device == device) all.push_back(entry);
          });
          break;
        }
        room = all.size() + s.table.size();
      }
      try {
        all.reserve(room + room / 4);
      } catch (const std::bad_alloc&) {
        note_internal_error();
        return {};
      }
    }
  }
  return all;
}

}  // namespace vramspill::core
