// The stream captures in progress, by the stream each began on (hooks/capture_hooks.cpp), and
// their count, which tiered mode and the spill paths read before any call a capture forbids.
//
// Note [Counting captures]
// A capture is counted when a cuStreamBeginCapture (any of its forms) succeeds, and uncounted when
// the stream it began on stops capturing: at a cuStreamEndCapture of that stream, whatever it
// returns (an invalidated capture ends too), or when the program destroys that stream. A count kept
// without the streams uncounted a capture only at an end it saw, so a capture whose stream was
// destroyed never ended (which stopped tiered mode's moves and the shim's frees for the rest of the
// process), and an end on a stream that merely took part in another's capture could uncount that
// one. Every change is made holding the capture gate exclusively (core/capture_gate.h), so the
// count never changes under a caller that holds the gate shared; an end and the look at its stream
// after it are made under the same hold, so a capture another thread begins on that stream in
// between cannot look like this one going on. A per-thread default stream is one key for every
// thread: each capture of one is an entry, and an end takes one. A context that ends (destroyed, or
// a primary context reset) takes its streams' captures with it, and its streams' handles, which
// can no longer be asked: each capture is kept with its stream's context, and every capture of
// a context that ends is uncounted then.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace vramspill::core {

class CaptureOrigins {
 public:
  // `count`: the captures in progress, kept equal to the entries here.
  explicit CaptureOrigins(std::atomic<int>& count) noexcept : count_(count) {}
  CaptureOrigins(const CaptureOrigins&) = delete;
  CaptureOrigins& operator=(const CaptureOrigins&) = delete;

  // A capture began on `stream`, of `context` (0 when unknown: it never ends with a context).
  // Counted even when the list cannot grow: then it never ends, which holds moves and frees off
  // for good rather than break a capture.
  void begun(uint64_t stream, uint64_t context) noexcept {
    count_.fetch_add(1, std::memory_order_acq_rel);
    try {
      origins_.push_back({.stream = stream, .context = context});
    } catch (...) {
    }
  }

  // The capture begun on `stream` of `context` ended, or `stream` is gone; nothing when none
  // began there. A per-thread default stream is one key in every context: the capture of the
  // ending one's context goes, or, where that is unknown (0), any on the key.
  void ended(uint64_t stream, uint64_t context) noexcept {
    auto found = std::ranges::find_if(origins_, [&](const Origin& origin) {
      return origin.stream == stream && origin.context == context;
    });
    if (found == origins_.end()) found = std::ranges::find(origins_, stream, &Origin::stream);
    if (found != origins_.end()) erase(found);
  }

  // `context` ended, with every capture of its streams.
  void context_ended(uint64_t context) noexcept {
    if (context == 0) return;
    for (auto found = origins_.begin(); found != origins_.end();) {
      if (found->context == context) {
        erase(found);  // the last one takes its place: looked at next
      } else {
        ++found;
      }
    }
  }

  bool began_on(uint64_t stream) const noexcept {
    return std::ranges::find(origins_, stream, &Origin::stream) != origins_.end();
  }

 private:
  struct Origin {
    uint64_t stream;
    uint64_t context;
  };

  void erase(std::vector<Origin>::iterator found) noexcept {
    *found = origins_.back();  // their order does not matter
    origins_.pop_back();
    count_.fetch_sub(1, std::memory_order_acq_rel);
  }

  std::atomic<int>& count_;
  std::vector<Origin> origins_;
};

}  // namespace vramspill::core
