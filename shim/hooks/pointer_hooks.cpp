// Pointer queries tell the truth about spilled memory (shim/README.md, "Budgets and honesty"). The
// driver's answers are already true for almost everything: a managed spill is managed memory, a
// host-pool block is mapped host memory. The exception is the extent of a host-pool block: the
// driver knows only the pinned region the pool cut it from (a gigabyte, say), while the program
// allocated the block. So for an address inside a live host-pool block, the range a query reports
// (base and size: cuMemGetAddressRange, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR and _RANGE_SIZE) is
// the block's, as it would have been for the device allocation it stands in for. The same goes
// for a tiered block, which the driver knows as separately mapped 2 MiB granules. So is the device
// of a host-pool block (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, and _CONTEXT: its primary context):
// the pool pins in the primary context of the first device that spilled, and a block spilled for
// another device would otherwise name that one, which frameworks take as the tensor's device
// (PyTorch's from_blob and __cuda_array_interface__ imports). Everything else is the driver's own
// answer.
//
// Note [Pointer queries in the remap window]
// A move of the remap mover unmaps a tiered block's granules for a moment before it maps their
// new backing at the same address, and a driver asked about an address there meanwhile answers
// as for memory it never handed out: cuPointerGetAttribute fails with CUDA_ERROR_INVALID_VALUE,
// cuPointerGetAttributes says unregistered host memory (tests/shim/stress/ found it, a thread's
// new block queried while another thread's allocation evicted it). So a query about an address in
// a tiered block reaches the driver from inside the remap window, as a submission does (Note
// [Remap window] in core/remap_window.h): a move waits for it, and it for a move. Other queries
// never wait for a move. The prefetch mover's blocks are managed memory, never unmapped.
#include <optional>

#include "driver/device_work.h"
#include "hooks/hook.h"
#include "hooks/shim_state.h"

using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

struct Extent {
  CUdeviceptr base = 0;
  size_t size = 0;
  int device = 0;          // the device it was allocated for
  bool host_pool = false;  // a host-pool block: the driver names the pool's device
};

// The allocation a spilled host-pool block or a tiered block stands for, if `address` lies in one.
std::optional<Extent> stand_in_block(CUdeviceptr address) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return std::nullopt;
  std::optional<CUdeviceptr> start = shim->host.block_containing(address);
  vramspill::core::Route route = vramspill::core::Route::kSpillHost;
  if (!start) {
    start = shim->tiered.block_containing(address);
    route = vramspill::core::Route::kTiered;
  }
  if (!start) return std::nullopt;
  // The ledger has the size the program asked for; the block may be rounded up.
  const auto allocation = shim->ledger.find(*start);
  if (!allocation || allocation->route != route) return std::nullopt;
  return Extent{.base = *start,
                .size = allocation->bytes,
                .device = allocation->device,
                .host_pool = route == vramspill::core::Route::kSpillHost};
}

// Rewrites an attribute the driver answered for the pool's region or device.
void correct(CUpointer_attribute attribute, void* data, const Extent& block) {
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *static_cast<CUdeviceptr*>(data) = block.base;
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *static_cast<size_t*>(data) = block.size;
  if (!block.host_pool) return;
  if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) *static_cast<int*>(data) = block.device;
  // The device's primary context, where the program (through the runtime) allocated, if it is
  // active; one made for the query would be reset by the release that ends it, and the program
  // would get a context nobody holds. Otherwise the driver's answer (the pool's context) stands.
  if (attribute == CU_POINTER_ATTRIBUTE_CONTEXT) {
    if (const uint64_t context = vramspill::driver::active_primary_context(block.device))
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(context);
  }
}

// The block's extent is its own whatever the driver answered (it may not describe page-locked
// host memory); its device is corrected only in an answer the driver gave.
bool is_range_attribute(CUpointer_attribute attribute) {
  return attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
         attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE;
}

// The attributes correct() may rewrite: only queries of these look up the block.
bool is_corrected(CUpointer_attribute attribute) {
  return is_range_attribute(attribute) || attribute == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL ||
         attribute == CU_POINTER_ATTRIBUTE_CONTEXT;
}

// The driver's answer to `query` about `address`, asked inside the remap window where the address
// lies in a tiered block (Note [Pointer queries in the remap window]).
template <typename Query>
CUresult asked_while_still(CUdeviceptr address, Query query) {
  std::optional<vramspill::core::RemapWindow::Submission> still;
  {
    const Entry entry;
    ShimState* shim = entry.state();
    if (shim != nullptr && shim->tiered.block_containing(address))
      still.emplace(shim->window.enter());
  }
  return query();
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize,
                                                        CUdeviceptr dptr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemGetAddressRange_v2);
  const CUresult result = real(pbase, psize, dptr);
  // The answer for a block does not depend on the driver's: a driver that does not describe
  // page-locked host memory here gets the block's extent all the same.
  if (const std::optional<Extent> block = stand_in_block(dptr)) {
    if (pbase != nullptr) *pbase = block->base;
    if (psize != nullptr) *psize = block->size;
    return CUDA_SUCCESS;
  }
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                                      CUdeviceptr ptr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuPointerGetAttribute);
  const CUresult result = asked_while_still(ptr, [&] { return real(data, attribute, ptr); });
  if (data == nullptr || !is_corrected(attribute)) return result;
  if (const std::optional<Extent> block = stand_in_block(ptr);
      block && (result == CUDA_SUCCESS || is_range_attribute(attribute))) {
    correct(attribute, data, *block);
    return CUDA_SUCCESS;
  }
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                                       CUpointer_attribute* attributes,
                                                       void** data, CUdeviceptr ptr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuPointerGetAttributes);
  const CUresult result =
      asked_while_still(ptr, [&] { return real(numAttributes, attributes, data, ptr); });
  if (result != CUDA_SUCCESS) return result;  // NULL arrays included: the driver checked them
  bool asks_corrected = false;
  for (unsigned int i = 0; i < numAttributes; ++i)
    asks_corrected = asks_corrected || is_corrected(attributes[i]);
  if (!asks_corrected) return result;
  if (const std::optional<Extent> block = stand_in_block(ptr)) {
    for (unsigned int i = 0; i < numAttributes; ++i) correct(attributes[i], data[i], *block);
  }
  return result;
}
