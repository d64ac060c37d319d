// One stream-ordered request against one pool, from reading the pool's figure to settling its
// growth (Note [Stream-ordered pools in the budget] in core/ledger.h), with the pool's lock held
// throughout (PoolBooks::lock()) but for the wait before a trim. The driver's part comes through PoolDriver (hooks/
// pool_tracking.cpp on the real driver, fakes in tests/shim/placement/admission_flow_test.cpp).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <optional>

#include "core/ledger.h"
#include "placement/pool_books.h"

namespace vramspill::placement {

// A stream-ordered pool's reserved and handed-out bytes.
struct PoolUsage {
  uint64_t reserved = 0;
  uint64_t used = 0;
};

// What an exchange asks of the driver beyond the books' queries.
class PoolDriver {
 public:
  // The pool's figures, or nullopt when the driver does not say (Note [A pool figure the driver
  // does not give] in placement/pool_books.h).
  virtual std::optional<PoolUsage> usage(CUmemoryPool pool) noexcept = 0;
  // A request that grew `pool` past the budget leaves nothing behind in three steps: its block is
  // freed on its stream, the stream waited for, so that the free has happened, and the pool
  // trimmed of its unused reserve.
  // Frees `block` on `stream`; false when the block stays the program's: it could not be freed,
  // or a stream capture is in progress (the wait that follows could invalidate the program's
  // graph).
  virtual bool free_for_trim(CUmemoryPool pool, CUdeviceptr block, CUstream stream) noexcept = 0;
  // Waits for `stream` to reach that free, without the pool's lock (Note [Waiting outside the
  // pool's lock] in placement/pool_exchange.cpp); false when it could not, or a capture has
  // begun since.
  virtual bool wait_for_free(CUstream stream) noexcept = 0;
  // Trims `pool` of its unused reserve, with the pool's lock held again; not while a capture is
  // in progress.
  virtual void trim(CUmemoryPool pool) noexcept = 0;

 protected:
  PoolDriver() = default;
  ~PoolDriver() = default;
  PoolDriver(const PoolDriver&) = default;
  PoolDriver& operator=(const PoolDriver&) = default;
};

class PoolExchange {
 public:
  // Refreshes the pools' figures first if a request of `bytes` may not fit, then locks `pool`.
  PoolExchange(core::Ledger& ledger, PoolBooks& books, PoolDriver& driver, int device,
               CUmemoryPool pool, uint64_t bytes);

  // Records the pool's reserve as the driver reports it now, and returns the ledger's admission
  // for the request, counting the pool's unused reserve and its size cap.
  core::Admission admit(core::Route route);

  // What the pool grows by when it grows for the request (core::pool_growth()), as admit() last
  // reckoned it: the room tiered mode is asked for.
  uint64_t growth() const { return growth_; }

  // After a successful driver call under `admission`: true once the pool's growth is in the
  // budget. False when it does not fit: the block has been given back (PoolDriver::free_for_trim()),
  // the admission cancelled, and `admission.refusal` says why; `retry` is whether trimming freed
  // room worth a second attempt.
  bool settle(core::Admission& admission, CUdeviceptr block, CUstream stream, bool& retry);

  // Ends the exchange (the destructor does too): spills and logs happen without the lock.
  void unlock() { lock_.unlock(); }

 private:
  // The pool's reserve now (asked twice), or if the driver does not say, the ledger's figure plus
  // `assumed` (Note [A pool figure the driver does not give] in placement/pool_books.h).
  uint64_t reserved_now(uint64_t assumed_growth) const;

  core::Ledger& ledger_;
  PoolBooks& books_;
  PoolDriver& driver_;
  int device_;
  CUmemoryPool pool_;
  uint64_t bytes_;
  std::unique_lock<std::mutex> lock_;
  uint64_t reserved_at_admission_ = 0;
  uint64_t growth_ = 0;
};

}  // namespace vramspill::placement
