// CUDA arrays: cuArrayCreate, cuArray3DCreate, cuArrayDestroy and their descriptors; mipmapped
// arrays: cuMipmappedArrayCreate, cuMipmappedArrayGetLevel, cuMipmappedArrayDestroy.
//
// Note [Arrays are opaque]
// An array is device memory in a layout the program never sees: it is reached only through
// texture and surface objects and the array copies, none of which simcuda implements. So an array
// here is its descriptor and a VRAM charge, nothing else: no address range, no backing bytes. The
// charge is exact, width x max(height, 1) x max(depth, 1) x channels x element size (the driver
// pads to its tiling; simcuda does not), and it stays on the device of the context that was
// current at creation until cuArrayDestroy. That is what a layer that budgets VRAM has to get
// right, and what the tests check through cuMemGetInfo.
//
// A mipmapped array is charged the sum of its levels (Note [Mipmap levels] in
// util/mipmap_levels.h, shared with the shim) until cuMipmappedArrayDestroy. Its level arrays are
// arrays with their level's descriptor and no charge of their own; they live as long as the
// mipmapped array, and cuArrayDestroy refuses them as it refuses any handle the program did not
// create (unverified).
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/api.h"
#include "core/context.h"
#include "core/device.h"
#include "core/handle_table.h"
#include "util/array_format.h"
#include "util/mipmap_levels.h"

namespace {

struct Array {
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  simcuda::Device* device = nullptr;
  uint64_t charged_bytes = 0;
  bool is_mipmap_level = false;  // owned by a mipmapped array: never destroyed on its own
};

struct MipmappedArray {
  simcuda::Device* device = nullptr;
  uint64_t charged_bytes = 0;
  std::vector<Array*> levels;  // entries of arrays(), removed with the mipmapped array
};

// One lock for both tables: a mipmapped array's levels are entries of arrays().
std::mutex arrays_mutex;
simcuda::HandleTable<Array>& arrays() {
  static auto* live = new simcuda::HandleTable<Array>();  // outlives exit
  return *live;
}
simcuda::HandleTable<MipmappedArray>& mipmapped_arrays() {
  static auto* live = new simcuda::HandleTable<MipmappedArray>();  // outlives exit
  return *live;
}

constexpr unsigned int kSupportedFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST |
                                         CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER |
                                         CUDA_ARRAY3D_COLOR_ATTACHMENT;
// Sparse and deferred-mapping arrays own no memory until mapped (cuMemMapArrayAsync).
constexpr unsigned int kUnsupportedFlags = CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING;

// Checks `d` as cuArray3DCreate does; on success `bytes` is the array's size.
CUresult check_descriptor(const CUDA_ARRAY3D_DESCRIPTOR& d, uint64_t* bytes) {
  // Only the eight classic formats (vramspill::array_channel_bytes is 0 for the others, which
  // simcuda refuses as invalid).
  const uint64_t element = vramspill::array_channel_bytes(d.Format);
  if (d.Width == 0 || element == 0) return CUDA_ERROR_INVALID_VALUE;
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4)
    return CUDA_ERROR_INVALID_VALUE;
  if ((d.Flags & kUnsupportedFlags) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  if ((d.Flags & ~kSupportedFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  const bool layered = (d.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  // A depth without a height is a layered 1D array only.
  if (d.Height == 0 && d.Depth != 0 && !layered) return CUDA_ERROR_INVALID_VALUE;
  if (layered && d.Depth == 0) return CUDA_ERROR_INVALID_VALUE;
  if ((d.Flags & CUDA_ARRAY3D_CUBEMAP) != 0) {
    // Six square faces, or a multiple of six layers of them.
    if (d.Width != d.Height || d.Depth == 0 || d.Depth % 6 != 0 || (!layered && d.Depth != 6))
      return CUDA_ERROR_INVALID_VALUE;
  }
  if ((d.Flags & CUDA_ARRAY3D_TEXTURE_GATHER) != 0 && (d.Height == 0 || d.Depth != 0))
    return CUDA_ERROR_INVALID_VALUE;  // gather is for 2D arrays
  const auto at_least_one = [](uint64_t extent) { return extent == 0 ? uint64_t{1} : extent; };
  uint64_t size = d.Width;
  // An array no device could hold (the product overflows) is an allocation that does not fit.
  if (__builtin_mul_overflow(size, at_least_one(d.Height), &size) ||
      __builtin_mul_overflow(size, at_least_one(d.Depth), &size) ||
      __builtin_mul_overflow(size, uint64_t{d.NumChannels} * element, &size))
    return CUDA_ERROR_OUT_OF_MEMORY;
  *bytes = size;
  return CUDA_SUCCESS;
}

CUresult create_array(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& descriptor) {
  uint64_t bytes = 0;
  if (CUresult invalid = check_descriptor(descriptor, &bytes); invalid != CUDA_SUCCESS)
    return invalid;
  simcuda::Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Charged before the table's lock is taken: charge() may evict managed pages.
  if (!context->device->charge(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto array = std::make_shared<Array>(
      Array{.descriptor = descriptor, .device = context->device, .charged_bytes = bytes});
  *handle = reinterpret_cast<CUarray>(array.get());
  const std::lock_guard lock(arrays_mutex);
  arrays().emplace(array.get(), std::move(array));
  return CUDA_SUCCESS;
}

std::shared_ptr<Array> find_array(CUarray handle) {
  const std::lock_guard lock(arrays_mutex);
  return simcuda::find_handle(arrays(), handle);
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle,
                                                 const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  SIMCUDA_ENTER("cuArrayCreate_v2");
  if (pHandle == nullptr || pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_ARRAY_DESCRIPTOR& d = *pAllocateArray;
  return create_array(pHandle, {.Width = d.Width,
                                .Height = d.Height,
                                .Depth = 0,
                                .Format = d.Format,
                                .NumChannels = d.NumChannels,
                                .Flags = 0});
}

SIMCUDA_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle,
                                                   const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  SIMCUDA_ENTER("cuArray3DCreate_v2");
  if (pHandle == nullptr || pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return create_array(pHandle, *pAllocateArray);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  SIMCUDA_ENTER("cuArrayDestroy");
  std::shared_ptr<Array> array;
  {
    const std::lock_guard lock(arrays_mutex);
    const auto found = arrays().find(reinterpret_cast<Array*>(hArray));
    if (found == arrays().end() || found->second->is_mipmap_level) return CUDA_ERROR_INVALID_HANDLE;
    array = std::move(found->second);
    arrays().erase(found);
  }
  array->device->uncharge(array->charged_bytes);
  return CUDA_SUCCESS;
}

// A 1D or 2D array's descriptor; a 3D or layered array has none in this form (unverified: the
// documentation says only that this function is for 1D and 2D arrays).
SIMCUDA_EXPORT CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor,
                                                        CUarray hArray) {
  SIMCUDA_ENTER("cuArrayGetDescriptor_v2");
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<Array> array = find_array(hArray);
  if (array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const CUDA_ARRAY3D_DESCRIPTOR& d = array->descriptor;
  if (d.Depth != 0) return CUDA_ERROR_INVALID_VALUE;
  *pArrayDescriptor = {.Width = d.Width,
                       .Height = d.Height,
                       .Format = d.Format,
                       .NumChannels = d.NumChannels};
  return CUDA_SUCCESS;
}

// Any array's descriptor, as it was created (a 1D or 2D array reads with Depth 0).
SIMCUDA_EXPORT CUresult CUDAAPI cuArray3DGetDescriptor_v2(
    CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  SIMCUDA_ENTER("cuArray3DGetDescriptor_v2");
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<Array> array = find_array(hArray);
  if (array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pArrayDescriptor = array->descriptor;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMipmappedArrayCreate(
    CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
    unsigned int numMipmapLevels) {
  SIMCUDA_ENTER("cuMipmappedArrayCreate");
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_ARRAY3D_DESCRIPTOR& d = *pMipmappedArrayDesc;
  uint64_t level_zero_bytes = 0;
  if (CUresult invalid = check_descriptor(d, &level_zero_bytes); invalid != CUDA_SUCCESS)
    return invalid;
  const unsigned int level_count = vramspill::mipmap_level_count(d, numMipmapLevels);
  const std::optional<uint64_t> bytes = vramspill::mipmapped_array_bytes(
      d, level_count, uint64_t{d.NumChannels} * vramspill::array_channel_bytes(d.Format));
  if (!bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  simcuda::Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Charged before the table's lock is taken: charge() may evict managed pages.
  if (!context->device->charge(*bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto mipmap = std::make_shared<MipmappedArray>(
      MipmappedArray{.device = context->device, .charged_bytes = *bytes, .levels = {}});
  const std::lock_guard lock(arrays_mutex);
  for (unsigned int level = 0; level < level_count; ++level) {
    const vramspill::ArrayExtent extent = vramspill::mipmap_level_extent(d, level);
    CUDA_ARRAY3D_DESCRIPTOR level_descriptor = d;
    level_descriptor.Width = extent.width;
    level_descriptor.Height = extent.height;
    level_descriptor.Depth = extent.depth;
    auto array = std::make_shared<Array>(Array{.descriptor = level_descriptor,
                                               .device = context->device,
                                               .charged_bytes = 0,
                                               .is_mipmap_level = true});
    mipmap->levels.push_back(array.get());
    arrays().emplace(array.get(), std::move(array));
  }
  *pHandle = reinterpret_cast<CUmipmappedArray>(mipmap.get());
  mipmapped_arrays().emplace(mipmap.get(), std::move(mipmap));
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray* pLevelArray,
                                                         CUmipmappedArray hMipmappedArray,
                                                         unsigned int level) {
  SIMCUDA_ENTER("cuMipmappedArrayGetLevel");
  if (pLevelArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::lock_guard lock(arrays_mutex);
  const std::shared_ptr<MipmappedArray> mipmap =
      simcuda::find_handle(mipmapped_arrays(), hMipmappedArray);
  if (mipmap == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (level >= mipmap->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *pLevelArray = reinterpret_cast<CUarray>(mipmap->levels[level]);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  SIMCUDA_ENTER("cuMipmappedArrayDestroy");
  std::shared_ptr<MipmappedArray> mipmap;
  {
    const std::lock_guard lock(arrays_mutex);
    const auto found = mipmapped_arrays().find(reinterpret_cast<MipmappedArray*>(hMipmappedArray));
    if (found == mipmapped_arrays().end()) return CUDA_ERROR_INVALID_HANDLE;
    mipmap = std::move(found->second);
    mipmapped_arrays().erase(found);
    for (Array* level : mipmap->levels) arrays().erase(level);
  }
  mipmap->device->uncharge(mipmap->charged_bytes);
  return CUDA_SUCCESS;
}
