#include "placement/pool_exchange.h"

#include <limits>

#include "telemetry/log.h"
#include "util/bytes.h"

namespace vramspill::placement {

PoolExchange::PoolExchange(core::Ledger& ledger, PoolBooks& books, PoolDriver& driver, int device,
                           CUmemoryPool pool, uint64_t bytes)
    : ledger_(ledger), books_(books), driver_(driver), device_(device), pool_(pool), bytes_(bytes) {
  // Note [Refreshing pool figures] in pool_books.cpp; before this pool's lock, which refresh()
  // would try.
  constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
  if (bytes_ > ledger_.budget_view(device_, kUnknown, kUnknown).free_bytes) books_.refresh(ledger_);
  lock_ = books_.lock(pool_);
  books_.track(device_, pool_);
}

core::Admission PoolExchange::admit(core::Route route) {
  const std::optional<PoolUsage> usage = driver_.usage(pool_);
  // Note [A pool figure the driver does not give] in pool_books.h: the ledger's figure, and no
  // unused reserve counted on.
  reserved_at_admission_ = usage ? usage->reserved : ledger_.pool_figure(pool_key(pool_));
  const uint64_t free_reserved =
      usage && usage->reserved > usage->used ? usage->reserved - usage->used : 0;
  const uint64_t cap = books_.size_cap(pool_);
  const uint64_t room_under_cap =
      cap == 0 ? core::kUncappedPool
               : (cap > reserved_at_admission_ ? cap - reserved_at_admission_ : 0);
  // Also when the unused reserve should hold the request: the pool may grow all the same (its
  // reserve fragmented, or freed on another stream), and room is then made for the chunk.
  growth_ = core::pool_growth(bytes_, room_under_cap);
  // The figure as the driver has it now: the pool may have given memory back at a
  // synchronisation the shim did not see, and no one else reports it while the lock is held.
  if (usage) ledger_.set_pool_reserved(device_, pool_key(pool_), usage->reserved);
  return ledger_.admit(device_, route, bytes_, free_reserved, room_under_cap);
}

bool PoolExchange::settle(core::Admission& admission, CUdeviceptr block, CUstream stream,
                          bool& retry) {
  retry = false;
  const uint64_t grown = reserved_now(admission.reserved_bytes);
  if (ledger_.settle_pool_growth(admission, pool_key(pool_), grown)) return true;
  // A block that stays the program's keeps the growth, taken as it is (graph allocations do not
  // normally grow the pool at all).
  if (!driver_.free_for_trim(pool_, block, stream)) {
    ledger_.cancel(admission);
    admission.reserved_bytes = 0;
    ledger_.set_pool_reserved(device_, pool_key(pool_), grown);
    return true;
  }
  // Note [Waiting outside the pool's lock]
  // The trim must follow the free, so the stream is waited for; under the lock, which pools share
  // (PoolBooks::lock()), every request on those pools would wait for this stream's queue, and
  // one whose thread queues the work this stream waits for (a collective's peer on another
  // device, a stream-memory-op flag) would never come. Meanwhile the books hold the pool at its
  // grown reserve, the memory the device holds until the trim, so that no request is admitted
  // into room the pool has taken. The trim itself is made with the lock held again, when no
  // request is between its admission and its driver call: one admitted against the unused
  // reserve would otherwise see that reserve trimmed under it.
  ledger_.set_pool_reserved(device_, pool_key(pool_), grown);
  ledger_.cancel(admission);
  lock_.unlock();
  const bool freed = driver_.wait_for_free(stream);
  lock_.lock();
  if (freed) driver_.trim(pool_);
  const uint64_t trimmed = reserved_now(0);
  ledger_.set_pool_reserved(device_, pool_key(pool_), trimmed);
  // Trimming gave back more than this request's growth: unused reserve that could not serve the
  // request was what filled the budget, and a second attempt may fit.
  retry = trimmed < reserved_at_admission_;
  logging::debug(
      "{} of {}: its pool grew from {} to {}, past the device budget; the block was "
      "given back and the pool trimmed to {}",
      core::route_name(admission.route), format_bytes(admission.requested_bytes),
      format_bytes(reserved_at_admission_), format_bytes(grown), format_bytes(trimmed));
  return false;
}

uint64_t PoolExchange::reserved_now(uint64_t assumed_growth) const {
  // Asked twice, as a failed step of give_back() is made twice: a transient failure then costs
  // nothing, where the assumption would refuse a request the unused reserve held.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (const std::optional<PoolUsage> usage = driver_.usage(pool_)) return usage->reserved;
  }
  return ledger_.pool_figure(pool_key(pool_)) + assumed_growth;
}

}  // namespace vramspill::placement
