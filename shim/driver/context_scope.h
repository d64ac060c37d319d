// A context made current on the calling thread for one scope, for driver calls that act on the
// current context: cuCtxPushCurrent on entry, cuCtxPopCurrent on exit, so the program's own
// context stack is as it was.
#pragma once

#include <cuda.h>

#include "driver/real_driver.h"

namespace vramspill::driver {

class ContextScope {
 public:
  explicit ContextScope(CUcontext context) noexcept : pop_(VRAMSPILL_REAL(cuCtxPopCurrent_v2)) {
    const auto push = VRAMSPILL_REAL(cuCtxPushCurrent_v2);
    if (push == nullptr || pop_ == nullptr) return;
    status_ = context != nullptr ? push(context) : CUDA_ERROR_INVALID_CONTEXT;
  }
  ~ContextScope() {
    if (!entered()) return;
    CUcontext popped = nullptr;
    pop_(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  // Whether the context is current now; if not, the push's error.
  bool entered() const noexcept { return status_ == CUDA_SUCCESS; }
  CUresult status() const noexcept { return status_; }

 private:
  decltype(&::cuCtxPopCurrent_v2) pop_;
  CUresult status_ = CUDA_ERROR_NOT_SUPPORTED;
};

}  // namespace vramspill::driver
