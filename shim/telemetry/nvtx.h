// What vramspill does, on the Nsight Systems timeline: NVTX ranges and marks in the domain
// "vramspill" (README.md, "Nsight Systems (NVTX)"). A remap window is a range on the thread that
// moves the granules; each direction a window moved granules in is a mark inside it; a spill is a
// mark on the thread that allocated. Marks carry the bytes as their payload.
//
// NVTX v3 is header-only (nvtx3/nvToolsExt.h, included by nvtx.cpp alone): nothing is linked,
// and the first call looks for a tool, dlopening the injection library NVTX_INJECTION64_PATH
// names (Nsight Systems sets it). Without one, or with one that fails to load, every call here
// costs a load and a test (Note [NVTX without a tool] in nvtx.cpp).
#pragma once

#include <cstdint>
#include <string_view>

namespace vramspill::nvtx {

// "vramspill: remap window", from construction to destruction. Open it before asking for the
// window, so that the range holds the wait for submissions too.
class RemapWindowRange {
 public:
  RemapWindowRange() noexcept;
  ~RemapWindowRange();
  RemapWindowRange(const RemapWindowRange&) = delete;
  RemapWindowRange& operator=(const RemapWindowRange&) = delete;

 private:
  bool pushed_ = false;
};

// "vramspill: evict 3 granules (6.0 MiB) to the host" and "vramspill: promote 2 granules
// (4.0 MiB) to the device", inside the window that moved them. Nothing for 0 granules.
void evicted(uint64_t granules, uint64_t bytes) noexcept;
void promoted(uint64_t granules, uint64_t bytes) noexcept;

// "vramspill: spill 4.0 MiB on device 0 to managed memory"; `where` names the tier as the log
// line does.
void spilled(uint64_t bytes, int device, std::string_view where) noexcept;

}  // namespace vramspill::nvtx
