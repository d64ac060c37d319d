// cuMemGetInfo under the shim reports what [report] memory_info says (shim/README.md, "Budgets and
// honesty"). Frameworks size themselves from it (vLLM's KV cache, JAX's preallocation, TensorFlow's
// allow_growth=false), so the choice decides whether they stay within the budget or fill the spill
// tier on purpose:
//   budget    total = the limit, free = the limit minus the device bytes the job holds (never
//             more than the driver's own free figure);
//   physical  the driver's figures, untouched;
//   virtual   the budget view plus the host limit: total adds the whole limit, free what is
//             left of it (nothing is added when [spill] mode = "off").
#include <algorithm>
#include <limits>
#include <optional>

#include "hooks/admission.h"
#include "hooks/hook.h"
#include "hooks/pool_tracking.h"

using vramspill::MemoryInfo;
using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

VRAMSPILL_HOOK CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemGetInfo_v2);
  const CUresult result = real(free, total);
  if (result != CUDA_SUCCESS) return result;  // NULL outputs included: the driver checked them
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr || shim->config.report.memory_info == MemoryInfo::kPhysical) return result;
  // Note [A failed device query fails the request] in hooks/devices.h: the device's own figures
  // would show memory past the budget as free.
  int device = 0;
  if (const CUresult failed = vramspill::hooks::current_device(device); failed != CUDA_SUCCESS)
    return failed;
  if (const CUresult failed = vramspill::hooks::know_device(*shim, device);
      failed != CUDA_SUCCESS)
    return failed;
  // Note [Refreshing pool figures] in placement/pool_books.cpp
  vramspill::hooks::pool_books().refresh(shim->ledger);
  const vramspill::core::MemInfo view = shim->ledger.budget_view(device, *free, *total);
  *free = view.free_bytes;
  *total = view.total_bytes;
  if (shim->config.report.memory_info == MemoryInfo::kVirtual &&
      shim->config.spill.mode != vramspill::SpillMode::kOff) {
    const auto saturating_add = [](size_t a, uint64_t b) {
      return b > std::numeric_limits<size_t>::max() - a ? std::numeric_limits<size_t>::max()
                                                         : a + b;
    };
    // Pinned but unused room in the host pool can take spills too.
    const vramspill::tiers::HostPoolStats pool = shim->host.stats();
    *free = saturating_add(*free, shim->host_budget.available() + pool.pinned_bytes -
                                      pool.used_bytes);
    *total = saturating_add(*total, shim->host_budget.limit());
    // A percent limit that fell below what the pool keeps pinned would leave free above total,
    // and a framework's total - free wraps.
    *free = std::min(*free, *total);
  }
  return result;
}
