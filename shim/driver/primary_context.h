// The shim's own references to primary contexts, counted.
//
// Note [The shim's references to primary contexts]
// The shim retains a device's primary context wherever it needs one to outlive the program's use
// of it: the pinned host pool pins in one (Note [The pool's context] in tiers/host_tier.h), each
// mover makes its streams and events in one, and a few calls run in one for a moment. cuda.h
// resets a primary context when the last reference to it is released, so these references would
// keep alive, after the program's last release, all the memory the driver would have freed then
// (Note [The last release of a primary context] in hooks/device_reset.h). Each of them is taken
// and given back through here, so that the shim can let go of all of them for a moment and learn
// from the driver whether anyone else still holds the context.
#pragma once

#include <cuda.h>

namespace vramspill::driver {

// cuDevicePrimaryCtxRetain, counted as one of the shim's references.
CUresult retain_primary(CUcontext* primary, int device) noexcept;

// cuDevicePrimaryCtxRelease of a reference retain_primary() took.
CUresult release_primary(int device) noexcept;

// Gives back every reference the shim holds to `device`'s primary context, then takes as many
// again: true when the context was inactive in between (the driver reset it, as the shim's were
// its last references), false when someone else held it or the driver did not say. Retains and
// releases through here wait meanwhile, so the count stays the driver's.
bool reset_if_only_the_shim_holds(int device) noexcept;

}  // namespace vramspill::driver
