// cuMipmappedArrayCreate and cuMipmappedArrayDestroy: a mipmapped array takes the bytes of all
// its levels (Note [Mipmap levels] in util/mipmap_levels.h) from its creation until its destroy,
// counted like the other arrays (Route::kArray, keyed by its handle) and, like them, never
// spilled. The level arrays cuMipmappedArrayGetLevel hands out are views of that memory and add
// nothing; the program never destroys them itself.
#include <cstdint>
#include <optional>

#include "hooks/hook.h"
#include "hooks/unspilled_allocation.h"
#include "util/mipmap_levels.h"

using vramspill::core::KeySpace;
using vramspill::hooks::array_creation;
using vramspill::hooks::forget_then_free;

VRAMSPILL_HOOK CUresult CUDAAPI cuMipmappedArrayCreate(
    CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
    unsigned int numMipmapLevels) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMipmappedArrayCreate);
  const auto create = [&] { return real(pHandle, pMipmappedArrayDesc, numMipmapLevels); };
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr ||
      !vramspill::hooks::array_owns_memory(*pMipmappedArrayDesc))
    return create();
  const CUDA_ARRAY3D_DESCRIPTOR& d = *pMipmappedArrayDesc;
  const std::optional<uint64_t> bytes = vramspill::mipmapped_array_bytes(
      d, vramspill::mipmap_level_count(d, numMipmapLevels),
      vramspill::hooks::array_element_bytes(d.NumChannels, d.Format));
  // A size past 2^64 bytes: no device holds it, and the wrapped-around sum must not be admitted
  // as a small array. The driver gives its error.
  if (!bytes) return create();
  return array_creation(pHandle, *bytes, create);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMipmappedArrayDestroy);
  return forget_then_free(reinterpret_cast<uint64_t>(hMipmappedArray), KeySpace::kArray,
                          [&] { return real(hMipmappedArray); });
}
