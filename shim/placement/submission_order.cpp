#include "placement/submission_order.h"

#include <optional>
#include <span>

namespace vramspill::placement {

SubmissionOrder::Passage SubmissionOrder::submit(const core::SubmissionUse& use) noexcept {
  if (use.count != 0) {
    // The policy's stream id: the CUstream's value folded to 32 bits (ids only tell streams
    // apart; a collision merely merges two streams' recency).
    const auto stream_id = static_cast<uint32_t>(use.stream ^ (use.stream >> 32));
    // The prefetch mover's blocks, if any; the remap mover's ignore them, and a device the
    // prefetch mover cannot serve has only the remap mover's.
    if (prefetch_ != nullptr) prefetch_->before_submission(use);
    placement_.before_submission(use.sequence, stream_id, std::span(use.blocks.data(), use.count));
  }
  core::RemapWindow::Submission entered = window_.enter();
  core::StreamSlots::Mark mark{};
  // Note [The tracked window]: inside the window, so that no move can miss this work.
  if (config_.window == WindowMode::kTracked) {
    mark = use_.mark_streams(use);
    // One slot for every context's legacy stream: a second context's use must mark it.
    if (mark.bit != 0 && core::StreamSlots::names_legacy_stream(use.stream))
      use_.stream_slots().submitted_in(mark, use.stream, events_.current_context());
    if (use.count != 0 || use.everything) placement_.order_after_copies(use, capturing());
  }
  return Passage(*this, std::move(entered), mark, use.stream);
}

void SubmissionOrder::finish(const Passage& passage) noexcept {
  core::StreamSlots& slots = use_.stream_slots();
  const std::optional<core::StreamSlots::Recording> due = slots.end_call(passage.mark_);
  if (!due) return;
  // During a capture an event recorded on the stream would be captured into the graph, and one
  // on the legacy stream would invalidate a global-mode capture elsewhere: none is recorded.
  const uint64_t context = capturing() ? 0 : events_.current_context();
  if (context == 0) {
    slots.recorded(*due, 0, 0);
    return;
  }
  uint64_t event = due->event != 0 ? due->event : events_.create();
  // A stream of another context than the event's refuses it: the entry is dropped.
  if (event != 0 && !events_.record(event, passage.stream_)) {
    events_.destroy(event);
    event = 0;
  }
  if (!slots.recorded(*due, event, context) && event != 0) events_.destroy(event);
}

}  // namespace vramspill::placement
