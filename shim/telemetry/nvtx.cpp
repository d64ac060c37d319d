#include "telemetry/nvtx.h"

#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>

#include <array>
#include <utility>

#include "util/bytes.h"

namespace vramspill::nvtx {
namespace {

// Note [NVTX without a tool]
// NVTX v3's entry points are function pointers that start out at an initialiser. The first
// call (here nvtxDomainCreateA, on the first event the shim would record) looks for a tool: the
// library NVTX_INJECTION64_PATH names is dlopened and its InitializeInjectionNvtx2 called. With
// no variable, a library that does not load, or an initialiser that fails, NVTX sets every entry
// point to null for good, and nvtxDomainCreateA returns null. The domain handle is kept in a
// function-local static, so from then on an event costs the static's guard load and a test of
// the handle: the message is built only when a tool listens. A tool's own driver calls during
// its initialisation (which may run inside a hook) are nested calls and go straight to the
// driver (Note [Entering the shim] in hooks/shim_state.h).
nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t handle = nvtxDomainCreateA("vramspill");
  return handle;
}

constexpr uint32_t kWindowColour = 0xff76b900;   // green
constexpr uint32_t kEvictColour = 0xffe6a000;    // amber
constexpr uint32_t kPromoteColour = 0xff2f8fd8;  // blue
constexpr uint32_t kSpillColour = 0xffd03030;    // red

nvtxEventAttributes_t attributes(const char* message, uint32_t colour) noexcept {
  nvtxEventAttributes_t event{};
  event.version = NVTX_VERSION;
  event.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  event.colorType = NVTX_COLOR_ARGB;
  event.color = colour;
  event.messageType = NVTX_MESSAGE_TYPE_ASCII;
  event.message.ascii = message;
  return event;
}

// A mark carrying `bytes` as its payload; the message is formatted into a buffer of ours (no
// allocation), truncated if it would not fit.
template <typename... Args>
void mark(nvtxDomainHandle_t handle, uint32_t colour, uint64_t bytes,
          fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    std::array<char, 256> message{};
    fmt::format_to_n(message.data(), message.size() - 1, format, std::forward<Args>(args)...);
    nvtxEventAttributes_t event = attributes(message.data(), colour);
    event.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    event.payload.ullValue = bytes;
    nvtxDomainMarkEx(handle, &event);
  } catch (...) {  // fmt could not format: the event is dropped, the job goes on
  }
}

struct Bytes {
  std::array<char, 16> text{};  // enough for any count (util/bytes.h)
  explicit Bytes(uint64_t bytes) noexcept { format_bytes(bytes, text); }
  const char* c_str() const noexcept { return text.data(); }
};

void moved(uint64_t granules, uint64_t bytes, const char* verb, const char* where,
           uint32_t colour) noexcept {
  const nvtxDomainHandle_t handle = domain();
  if (handle == nullptr || granules == 0) return;
  mark(handle, colour, bytes, "vramspill: {} {} granule{} ({}) to the {}", verb, granules,
       granules == 1 ? "" : "s", Bytes(bytes).c_str(), where);
}

}  // namespace

RemapWindowRange::RemapWindowRange() noexcept {
  const nvtxDomainHandle_t handle = domain();
  if (handle == nullptr) return;
  const nvtxEventAttributes_t event = attributes("vramspill: remap window", kWindowColour);
  // Popped whatever the push returns: a tool that keeps no depth answers a negative one.
  nvtxDomainRangePushEx(handle, &event);
  pushed_ = true;
}

RemapWindowRange::~RemapWindowRange() {
  if (pushed_) nvtxDomainRangePop(domain());
}

void evicted(uint64_t granules, uint64_t bytes) noexcept {
  moved(granules, bytes, "evict", "host", kEvictColour);
}

void promoted(uint64_t granules, uint64_t bytes) noexcept {
  moved(granules, bytes, "promote", "device", kPromoteColour);
}

void spilled(uint64_t bytes, int device, std::string_view where) noexcept {
  const nvtxDomainHandle_t handle = domain();
  if (handle == nullptr) return;
  mark(handle, kSpillColour, bytes, "vramspill: spill {} on device {} to {}", Bytes(bytes).c_str(),
       device, where);
}

}  // namespace vramspill::nvtx
