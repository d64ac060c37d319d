// A stand-in for the driver's VMM calls that keeps the driver's rules: mappings only inside a
// reservation, at granule-aligned addresses not already mapped; no release of a mapped granule,
// no cuMemAddressFree of a range with mappings, no unmap of a range with a hole in it or of
// part of a handle's mapping (a handle of several granules is mapped whole). And one of the
// arena's: a granule is mapped at two addresses at most, its home and one block's (Note
// [Granule homes] in tiers/granule_homes.h). A broken rule is recorded in misuse() (tests
// expect none), and any call can be made to fail on demand. Thread-safe: one lock per call.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tiers/granule_ops.h"

namespace vramspill::tiers {

class FakeGranuleOps final : public GranuleOps {
 public:
  enum Call {
    kReserve,
    kUnreserve,
    kCreate,
    kRelease,
    kMap,
    kUnmap,
    kSynchronize,
    kWaitForStreams,
    kBeginCopies,
    kCopy,
    kWait,
    kQueueAfter,
    kRecord,
    kMark,
    kFollow,
    kOrderStream,
    kCallCount
  };

  // Fails the `nth` (1-based) next call of `call` with `error`, besides those already to fail;
  // 0 clears them all.
  void fail(Call call, int nth, CUresult error = CUDA_ERROR_OUT_OF_MEMORY) {
    if (nth == 0) {
      fail_at_[call].clear();
    } else {
      fail_at_[call].insert(calls_[call] + nth);
    }
    error_[call] = error;
  }
  // Fails every call of `call` from the next one on.
  void fail_always(Call call, CUresult error = CUDA_ERROR_OUT_OF_MEMORY) {
    always_[call] = true;
    error_[call] = error;
  }
  void heal() {
    for (int call = 0; call < kCallCount; ++call) {
      fail_at_[call].clear();
      always_[call] = false;
    }
  }

  int calls(Call call) const { return calls_[call]; }
  // The cuMemMap calls map() stands for: one per handle.
  int handle_maps() const { return handle_maps_; }
  // How many granules the handles create() made hold, by handle.
  uint64_t granules_of(GranuleHandle handle) const { return sizes_.at(handle); }
  // Every call so far, in order.
  const std::vector<Call>& sequence() const { return sequence_; }
  // The streams the last wait_for_stream_ends() named, and their events (0: the whole stream).
  std::vector<uint64_t> streams_waited_for() const {
    std::vector<uint64_t> streams;
    for (const StreamEnd& end : ends_waited_for_) streams.push_back(end.stream);
    return streams;
  }
  const std::vector<StreamEnd>& ends_waited_for() const {
    return ends_waited_for_;
  }
  // The events the copies queued since the last queue_copies_after() wait for on the device.
  const std::vector<uint64_t>& events_queued_after() const { return events_queued_after_; }
  // The lane of each copy queued so far, in order.
  const std::vector<CopyLane>& copy_lanes() const { return copy_lanes_; }
  // Copies queued and not yet waited for.
  std::size_t copies_in_flight() const { return copies_in_flight_.size() / 2; }
  // The copies queued so far run to their end: their events have passed.
  void finish_copies() {
    const std::lock_guard lock(mutex_);
    copies_in_flight_.clear();
    passed_events_ = next_event_ - 1;
  }
  // Events record_copies() made and drop_event() did not give back.
  std::size_t live_events() const { return live_events_.size(); }
  // What order_stream_after() was asked, in order: a submission's stream, the event it waits for,
  // and whether a capture was in progress.
  struct StreamOrder {
    uint64_t stream = 0;
    uint64_t event = 0;
    bool capturing = false;
  };
  const std::vector<StreamOrder>& stream_orders() const { return stream_orders_; }
  const std::vector<std::string>& misuse() const { return misuse_; }
  // Unmaps made while copies (of other ranges) were in flight.
  int unmaps_beside_copies() const { return unmaps_beside_copies_; }
  std::size_t live_handles() const { return handles_.size(); }
  std::size_t live_handles(GranuleKind kind) const {
    std::size_t count = 0;
    for (const auto& [handle, held] : handles_) count += held == kind ? 1 : 0;
    return count;
  }
  // The granules the live handles hold.
  uint64_t live_granules() const {
    uint64_t count = 0;
    for (const auto& [handle, granules] : sizes_) count += granules;
    return count;
  }
  // Live handles of `kind` holding more than one granule.
  std::size_t live_chunks(GranuleKind kind) const {
    std::size_t count = 0;
    for (const auto& [handle, held] : handles_) count += held == kind && sizes_.at(handle) > 1 ? 1 : 0;
    return count;
  }
  std::size_t mappings() const { return mapped_.size(); }
  // How many addresses `handle` is mapped at.
  std::size_t mappings_of(GranuleHandle handle) const {
    const std::lock_guard lock(mutex_);
    return mappings_of_locked(handle);
  }
  std::size_t reservations() const { return reservations_.size(); }
  // The kind of memory mapped at `address` (granule-aligned), if any.
  std::optional<GranuleKind> mapped_kind(CUdeviceptr address) const {
    const auto found = mapped_.find(address);
    if (found == mapped_.end()) return std::nullopt;
    return handles_.at(found->second.first);
  }
  // The handle mapped at `address` (granule-aligned), if any.
  std::optional<GranuleHandle> mapped_handle(CUdeviceptr address) const {
    const auto found = mapped_.find(address);
    if (found == mapped_.end()) return std::nullopt;
    return found->second.first;
  }

  CUresult reserve(uint64_t bytes, CUdeviceptr* base) noexcept override {
    const std::lock_guard lock(mutex_);
    ++vmm_calls_;
    if (CUresult failure = injected(kReserve); failure != CUDA_SUCCESS) return failure;
    if (bytes == 0 || bytes % kGranuleBytes != 0) misuse_.push_back("reserve of a partial granule");
    *base = next_address_;
    next_address_ += bytes + kGranuleBytes;  // a gap, so that ranges never touch
    reservations_[*base] = bytes;
    return CUDA_SUCCESS;
  }
  CUresult unreserve(CUdeviceptr base, uint64_t bytes) noexcept override {
    const std::lock_guard lock(mutex_);
    ++vmm_calls_;
    if (CUresult failure = injected(kUnreserve); failure != CUDA_SUCCESS) return failure;
    const auto found = reservations_.find(base);
    if (found == reservations_.end() || found->second != bytes) {
      misuse_.push_back("unreserve of a range never reserved");
      return CUDA_ERROR_INVALID_VALUE;
    }
    const auto first = mapped_.lower_bound(base);
    if (first != mapped_.end() && first->first < base + bytes) {
      misuse_.push_back("unreserve of a range with mappings");
      return CUDA_ERROR_INVALID_VALUE;
    }
    reservations_.erase(found);
    return CUDA_SUCCESS;
  }
  CUresult create(GranuleKind kind, uint64_t granules, GranuleHandle* handle) noexcept override {
    const std::lock_guard lock(mutex_);
    ++vmm_calls_;
    if (CUresult failure = injected(kCreate); failure != CUDA_SUCCESS) return failure;
    if (granules > 1 && fail_chunks_) return CUDA_ERROR_OUT_OF_MEMORY;
    if (granules == 0) misuse_.push_back("create of no granule");
    *handle = next_handle_++;
    handles_[*handle] = kind;
    sizes_[*handle] = granules;
    return CUDA_SUCCESS;
  }
  // Whether create() refuses every handle of more than one granule (a driver out of large
  // contiguous memory).
  void fail_chunks(bool fail) { fail_chunks_ = fail; }
  CUresult release(GranuleHandle handle) noexcept override {
    const std::lock_guard lock(mutex_);
    ++vmm_calls_;
    if (CUresult failure = injected(kRelease); failure != CUDA_SUCCESS) return failure;
    if (handles_.erase(handle) == 0) {
      misuse_.push_back("release of an unknown handle");
      return CUDA_ERROR_INVALID_VALUE;
    }
    sizes_.erase(handle);
    for (const auto& [address, mapped] : mapped_) {
      if (mapped.first == handle) misuse_.push_back("release of a mapped granule");
    }
    return CUDA_SUCCESS;
  }
  // A run of handles: one call (one injected failure), counted as its cuMemMap calls (one per
  // handle) and one cuMemSetAccess.
  CUresult map(CUdeviceptr address, std::span<const Mapping> mappings) noexcept override {
    const std::lock_guard lock(mutex_);
    vmm_calls_ += mappings.size() + 1;
    if (CUresult failure = injected(kMap); failure != CUDA_SUCCESS) return failure;
    handle_maps_ += static_cast<int>(mappings.size());
    if (mappings.empty()) misuse_.push_back("map of no granule");
    CUdeviceptr at = address;
    for (const Mapping& mapping : mappings) {
      const auto size = sizes_.find(mapping.handle);
      if (size == sizes_.end()) {
        misuse_.push_back("map of an unknown handle");
      } else if (size->second != mapping.granules) {
        misuse_.push_back("map of part of a handle");
      }
      for (uint64_t part = 0; part < mapping.granules; ++part, at += kGranuleBytes) {
        if (at % kGranuleBytes != 0) misuse_.push_back("map at an unaligned address");
        if (!inside_a_reservation(at)) misuse_.push_back("map outside every reservation");
        if (!mapped_.emplace(at, std::pair(mapping.handle, part)).second)
          misuse_.push_back("map over a mapping");
      }
      if (mappings_of_locked(mapping.handle) > 2)
        misuse_.push_back("a granule mapped at three places");
    }
    return CUDA_SUCCESS;
  }
  CUresult unmap(CUdeviceptr address, uint64_t granules) noexcept override {
    const std::lock_guard lock(mutex_);
    ++vmm_calls_;
    if (CUresult failure = injected(kUnmap); failure != CUDA_SUCCESS) return failure;
    for (uint64_t i = 0; i < granules; ++i) {
      if (!mapped_.contains(address + i * kGranuleBytes)) {
        misuse_.push_back("unmap of nothing");
        return CUDA_ERROR_INVALID_VALUE;  // and nothing of the range is unmapped
      }
    }
    const auto after = mapped_.find(address + granules * kGranuleBytes);
    if (mapped_.at(address).second != 0 ||
        (after != mapped_.end() && after->second.second != 0 &&
         after->second.first == mapped_.at(address + (granules - 1) * kGranuleBytes).first)) {
      misuse_.push_back("unmap of part of a handle's mapping");
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (const auto& [from, bytes] : copies_in_flight_) {
      if (address < from + bytes && from < address + granules * kGranuleBytes)
        misuse_.push_back("unmap under a copy in flight");
    }
    if (!copies_in_flight_.empty()) ++unmaps_beside_copies_;
    for (uint64_t i = 0; i < granules; ++i) mapped_.erase(address + i * kGranuleBytes);
    return CUDA_SUCCESS;
  }
  uint64_t vmm_calls() const noexcept override {
    const std::lock_guard lock(mutex_);
    return vmm_calls_;
  }
  CUresult synchronize_device() noexcept override {
    const std::lock_guard lock(mutex_);
    return injected(kSynchronize);
  }
  CUresult wait_for_stream_ends(
      std::span<const StreamEnd> ends) noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kWaitForStreams); failure != CUDA_SUCCESS) return failure;
    ends_waited_for_.assign(ends.begin(), ends.end());
    return CUDA_SUCCESS;
  }
  CUresult begin_copies() noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kBeginCopies); failure != CUDA_SUCCESS) return failure;
    begin_epoch();
    return CUDA_SUCCESS;
  }
  // Copies the contents (tags) of each granule of the source range to the destination's. A copy
  // touching memory a copy of the same epoch on the other lane touches, at whichever address it
  // is mapped (a granule's home or its block's), is a misuse (Note [Two copy lanes]): on a GPU
  // the two may run at once.
  CUresult copy(CUdeviceptr destination, CUdeviceptr source, uint64_t bytes,
                CopyLane lane) noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kCopy); failure != CUDA_SUCCESS) return failure;
    const auto lane_index = static_cast<std::size_t>(lane);
    std::set<std::pair<GranuleHandle, uint64_t>> touched;
    for (const CUdeviceptr range : {source, destination}) {
      for (uint64_t offset = 0; offset < bytes; offset += kGranuleBytes) {
        const auto mapped = mapped_.find(range + offset);
        if (mapped == mapped_.end()) continue;  // reported below
        // The other lane's copies of this epoch that no mark this lane follows covers.
        const auto& others = epoch_[1 - lane_index];
        for (std::size_t i = followed_[lane_index]; i < others.size(); ++i) {
          if (others[i].contains(mapped->second))
            misuse_.push_back("copies on both lanes of an epoch touch the same memory");
        }
        touched.insert(mapped->second);
      }
    }
    epoch_[lane_index].push_back(std::move(touched));
    copy_lanes_.push_back(lane);
    for (uint64_t offset = 0; offset < bytes; offset += kGranuleBytes) {
      const auto from = mapped_.find(source + offset);
      const auto to = mapped_.find(destination + offset);
      if (from == mapped_.end() || to == mapped_.end()) {
        misuse_.push_back("copy to or from an unmapped granule");
        return CUDA_ERROR_INVALID_VALUE;
      }
      tags_[to->second] = tags_[from->second];  // by handle and part
    }
    copies_in_flight_.emplace_back(source, bytes);
    copies_in_flight_.emplace_back(destination, bytes);
    return CUDA_SUCCESS;
  }
  CUresult wait_for_copies() noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kWait); failure != CUDA_SUCCESS) return failure;
    begin_epoch();
    copies_in_flight_.clear();
    passed_events_ = next_event_ - 1;
    return CUDA_SUCCESS;
  }
  CUresult record_copies(uint64_t* event) noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kRecord); failure != CUDA_SUCCESS) return failure;
    begin_epoch();
    *event = next_event_++;
    live_events_.insert(*event);
    return CUDA_SUCCESS;
  }
  // A mark is an event whose place is the count of its lane's copies in this epoch.
  CUresult mark_copies(CopyLane lane, uint64_t* event) noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kMark); failure != CUDA_SUCCESS) return failure;
    *event = next_event_++;
    live_events_.insert(*event);
    marks_[*event] = {.epoch = epoch_number_,
                      .lane = static_cast<std::size_t>(lane),
                      .copies = epoch_[static_cast<std::size_t>(lane)].size()};
    return CUDA_SUCCESS;
  }
  CUresult follow_mark(CopyLane lane, uint64_t event) noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kFollow); failure != CUDA_SUCCESS) return failure;
    if (!live_events_.contains(event)) misuse_.push_back("a wait for an event given back");
    const auto lane_index = static_cast<std::size_t>(lane);
    const Mark& mark = marks_.at(event);
    if (mark.epoch == epoch_number_ && mark.lane != lane_index)
      followed_[lane_index] = std::max(followed_[lane_index], mark.copies);
    return CUDA_SUCCESS;
  }
  bool copies_done(uint64_t event) noexcept override {
    const std::lock_guard lock(mutex_);
    return event <= passed_events_;
  }
  void drop_event(uint64_t event) noexcept override {
    const std::lock_guard lock(mutex_);
    if (live_events_.erase(event) == 0) misuse_.push_back("drop of an event never recorded");
  }
  CUresult order_stream_after(uint64_t stream, uint64_t event, bool capturing) noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kOrderStream); failure != CUDA_SUCCESS) return failure;
    if (!live_events_.contains(event)) misuse_.push_back("a wait for an event given back");
    stream_orders_.push_back({.stream = stream, .event = event, .capturing = capturing});
    return CUDA_SUCCESS;
  }
  // A reset: the copies ran or were dropped with the context, and its events are gone.
  void forget_context() noexcept override {
    const std::lock_guard lock(mutex_);
    begin_epoch();
    copies_in_flight_.clear();
    passed_events_ = next_event_ - 1;
    live_events_.clear();
    ++context_resets_;
  }
  int context_resets() const {
    const std::lock_guard lock(mutex_);
    return context_resets_;
  }
  CUresult queue_copies_after(std::span<const uint64_t> events) noexcept override {
    const std::lock_guard lock(mutex_);
    if (CUresult failure = injected(kQueueAfter); failure != CUDA_SUCCESS) return failure;
    begin_epoch();
    events_queued_after_.assign(events.begin(), events.end());
    return CUDA_SUCCESS;
  }

  // What a test writes to and reads from the granule mapped at `address` (granule-aligned).
  void write(CUdeviceptr address, uint64_t tag) {
    const std::lock_guard lock(mutex_);
    tags_[mapped_.at(address)] = tag;
  }
  uint64_t read(CUdeviceptr address) {
    const std::lock_guard lock(mutex_);
    return tags_[mapped_.at(address)];
  }

 private:
  CUresult injected(Call call) {
    ++calls_[call];
    sequence_.push_back(call);
    if (always_[call] || fail_at_[call].contains(calls_[call])) return error_[call];
    return CUDA_SUCCESS;
  }
  std::size_t mappings_of_locked(GranuleHandle handle) const {
    std::size_t count = 0;
    for (const auto& [address, mapped] : mapped_) count += mapped == std::pair(handle, uint64_t{0}) ? 1 : 0;
    return count;
  }
  bool inside_a_reservation(CUdeviceptr address) const {
    auto after = reservations_.upper_bound(address);
    if (after == reservations_.begin()) return false;
    --after;
    return address - after->first < after->second;
  }

  int calls_[kCallCount] = {};
  std::vector<Call> sequence_;
  std::set<int> fail_at_[kCallCount];
  bool always_[kCallCount] = {};
  CUresult error_[kCallCount] = {};
  CUdeviceptr next_address_ = 0x7f0000000000;
  GranuleHandle next_handle_ = 1;
  std::map<CUdeviceptr, uint64_t> reservations_;
  std::map<GranuleHandle, GranuleKind> handles_;
  std::map<GranuleHandle, uint64_t> sizes_;  // granules
  // Each mapped granule: its handle, and which granule of the handle it is.
  std::map<CUdeviceptr, std::pair<GranuleHandle, uint64_t>> mapped_;
  std::map<std::pair<GranuleHandle, uint64_t>, uint64_t> tags_;
  bool fail_chunks_ = false;
  int handle_maps_ = 0;
  // The source and destination ranges of the copies not yet waited for: unmapping inside one
  // is what a GPU would fault on or copy wrong bytes from.
  std::vector<std::pair<CUdeviceptr, uint64_t>> copies_in_flight_;
  void begin_epoch() {
    for (auto& copies : epoch_) copies.clear();
    followed_ = {};
    ++epoch_number_;
  }
  // By lane, copy by copy, the granules (handle and part) the copies of this epoch read or write
  // (Note [Two copy lanes]), whose lanes may run at once; and how many of the other lane's each
  // lane follows through a mark (Note [Evictions ahead of promotions]).
  std::array<std::vector<std::set<std::pair<GranuleHandle, uint64_t>>>, 2> epoch_;
  std::array<std::size_t, 2> followed_{};
  uint64_t epoch_number_ = 0;
  struct Mark {
    uint64_t epoch = 0;
    std::size_t lane = 0;
    std::size_t copies = 0;  // its lane's copies in the epoch before it
  };
  std::map<uint64_t, Mark> marks_;
  std::vector<CopyLane> copy_lanes_;
  std::vector<std::string> misuse_;
  std::vector<StreamEnd> ends_waited_for_;
  std::vector<uint64_t> events_queued_after_;
  uint64_t next_event_ = 1;
  uint64_t passed_events_ = 0;  // events up to this one have passed
  int context_resets_ = 0;
  std::set<uint64_t> live_events_;
  std::vector<StreamOrder> stream_orders_;
  uint64_t vmm_calls_ = 0;
  int unmaps_beside_copies_ = 0;
  mutable std::mutex mutex_;
};

}  // namespace vramspill::tiers
