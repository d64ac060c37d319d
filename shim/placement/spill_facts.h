// What placement needs to know from outside itself, behind a seam: the driver's answers (is the
// device integrated, is the stream being captured) and the host's (how much memory the job may
// use). The shim answers through the real driver (hooks/driver_spill_facts.h); unit tests answer
// with fakes, so the whole decision flow runs without a driver.
#pragma once

#include <cuda.h>

#include "core/capture_gate.h"

namespace vramspill::placement {

class SpillFacts {
 public:
  // Note [Integrated devices] in hooks/devices.h.
  virtual bool integrated(int device) noexcept = 0;
  // Whether `stream` is being captured into a graph; the driver's error for a stream it does not
  // know is what the program's call gets too.
  virtual CUresult capturing(CUstream stream, bool& capturing) noexcept = 0;
  // Whether a stream capture is in progress on any stream of the process. Asked holding what
  // hold_off_captures() returns, the answer stands until that is let go: no capture begins.
  virtual bool capture_in_progress() noexcept = 0;
  virtual core::CaptureGate::Hold hold_off_captures() noexcept = 0;
  // Brings the host limit up to date before a spill reserves host memory (a percent limit follows
  // the memory the job may use, which changes while it runs).
  virtual void refresh_host_limit() noexcept = 0;
  // The driver's verdict on a cuMemCreate of `bytes` with `prop` that is not made (over the budget,
  // or where the driver ran out of memory): CUDA_SUCCESS when only memory was missing, else the
  // error the driver gives such a request (its properties refused, or a size that is not a
  // multiple of their granularity), which the program gets instead of CUDA_ERROR_OUT_OF_MEMORY.
  virtual CUresult check_vmm_request(const CUmemAllocationProp& prop, uint64_t bytes) noexcept = 0;

 protected:
  SpillFacts() = default;
  ~SpillFacts() = default;
  SpillFacts(const SpillFacts&) = default;
  SpillFacts& operator=(const SpillFacts&) = default;
};

}  // namespace vramspill::placement
