// A tiered-mode submission's way to the driver and back, in one place (Note [One way through
// for a submission]).
//
// Note [One way through for a submission]
// Every submission hook (hooks/submission_hooks.cpp) takes the same steps around its driver call.
// Before it: the blocks the submission names are made resident as the policy decides
// (TieredPlacement::before_submission(), outside the remap window: Note [Remap window]); the
// window is entered; and in the tracked window the submission's stream is marked (Note [Last
// uses by event] in core/stream_slots.h) and made to wait for the copies in flight into its
// blocks (Note [Moves copied on the stream] in tiers/granule_arena.h). After it, in the tracked
// window, an event is recorded on the stream when one is due, which is what later moves wait for
// instead of the stream's whole work. submit() takes the steps before and returns a Passage that
// holds the window; Passage::done() takes the step after. The events are made and recorded
// through SubmissionEvents (hooks/submission_events.h on the driver), so that all of this is
// tested without a driver (tests/shim/placement/submission_order_test.cpp).
#pragma once

#include <cstdint>

#include "config/config.h"
#include "core/capture_gate.h"
#include "core/remap_window.h"
#include "core/stream_slots.h"
#include "core/use_tracker.h"
#include "placement/prefetch_placement.h"
#include "placement/tiered_placement.h"

namespace vramspill::placement {

// The driver's events, as the tracked window records them. Events and contexts are plain
// numbers (a CUevent, a CUcontext).
class SubmissionEvents {
 public:
  // The calling thread's current context, or 0 when it has none.
  virtual uint64_t current_context() noexcept = 0;
  // A new event that keeps no time, or 0 when the driver makes none.
  virtual uint64_t create() noexcept = 0;
  // Records `event` on `stream`; false when the driver refuses (a stream of another context) or
  // the stream is being captured.
  virtual bool record(uint64_t event, uint64_t stream) noexcept = 0;
  virtual void destroy(uint64_t event) noexcept = 0;

 protected:
  SubmissionEvents() = default;
  ~SubmissionEvents() = default;
  SubmissionEvents(const SubmissionEvents&) = default;
  SubmissionEvents& operator=(const SubmissionEvents&) = default;
};

class SubmissionOrder {
 public:
  // `captures`: the stream captures in progress (an event or a wait on a capturing stream would
  // be captured into its graph). `config`: read at each submission for the window's mode.
  // `prefetch`: with [tiered] mover = "prefetch", the placement of the blocks that are managed
  // memory, told of each submission before the remap mover is (Note [The prefetch mover]).
  SubmissionOrder(TieredPlacement& placement, core::RemapWindow& window, core::UseTracker& use,
                  const core::CaptureGate& captures, const TieredConfig& config,
                  SubmissionEvents& events, PrefetchPlacement* prefetch = nullptr) noexcept
      : placement_(placement),
        prefetch_(prefetch),
        window_(window),
        use_(use),
        captures_(captures),
        config_(config),
        events_(events) {}
  SubmissionOrder(const SubmissionOrder&) = delete;
  SubmissionOrder& operator=(const SubmissionOrder&) = delete;

  // A submission inside the remap window, for its driver call.
  class [[nodiscard]] Passage {
   public:
    // The step after the driver call; the window is left when the Passage goes.
    void done() noexcept { order_.finish(*this); }

   private:
    friend class SubmissionOrder;
    Passage(SubmissionOrder& order, core::RemapWindow::Submission window,
            core::StreamSlots::Mark mark, uint64_t stream) noexcept
        : order_(order), window_(std::move(window)), mark_(mark), stream_(stream) {}

    SubmissionOrder& order_;
    core::RemapWindow::Submission window_;
    core::StreamSlots::Mark mark_;
    uint64_t stream_;
  };

  // The steps before the driver call of the submission `use` describes.
  Passage submit(const core::SubmissionUse& use) noexcept;

 private:
  void finish(const Passage& passage) noexcept;
  bool capturing() const noexcept { return captures_.capturing(); }

  TieredPlacement& placement_;
  PrefetchPlacement* prefetch_;
  core::RemapWindow& window_;
  core::UseTracker& use_;
  const core::CaptureGate& captures_;
  const TieredConfig& config_;
  SubmissionEvents& events_;
};

}  // namespace vramspill::placement
