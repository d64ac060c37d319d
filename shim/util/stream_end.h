// Where the work queued on one stream must have got to before tiered mode may remap what it
// touches (Note [Last uses by event] in core/stream_slots.h): past `event`, an event recorded on
// the stream, or with no event, everything queued on it so far.
#pragma once

#include <cstdint>

namespace vramspill {

struct StreamEnd {
  uint64_t stream = 0;  // the CUstream value; the legacy stream is 0
  uint64_t event = 0;   // a CUevent value, or 0
};

}  // namespace vramspill
