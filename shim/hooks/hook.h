// How a hook is declared and how it reaches the real driver.
#pragma once

#include <cuda.h>

#include "driver/real_driver.h"

// Hooks are exported under the driver's own names (the version script lists them).
#define VRAMSPILL_HOOK extern "C" __attribute__((visibility("default")))

// A hooked call whose real function is missing (the driver lacks the export) answers as a call
// of an unknown driver function would.
#define VRAMSPILL_REAL_OR_RETURN(function, name)          \
  const auto function = VRAMSPILL_REAL(name);             \
  if (function == nullptr) return CUDA_ERROR_NOT_FOUND
