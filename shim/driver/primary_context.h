// The shim's own references to primary contexts, counted.
//
// Note [The shim's references to primary contexts]
// The shim retains a device's primary context wherever it needs one to outlive the program's use
// of it: the pinned host pool pins in one (Note [The pool's context] in tiers/host_tier.h), each
// mover makes its streams and events in one, and a few calls run in one for a moment. cuda.h
// resets a primary context when the last reference to it is released, so these references would
// keep alive, after the program's last release, all the memory the driver would have freed then
// (Note [The last release of a primary context] in hooks/device_reset.h). Each of them is taken
// and given back through here, as a PrimaryReference, so that the shim can let go of all of them
// at once and learn from the driver whether anyone else still holds the context. If nobody does,
// the driver resets it and the references stay given up: the context is inactive, as without the
// shim, and each part retains a new one at its next need; the release of a reference given up
// does nothing. If somebody does, they are taken again.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace vramspill::driver {

// One reference retain_primary() took: none while `device` is -1.
struct PrimaryReference {
  int device = -1;
  uint64_t generation = 0;  // the device's references it belongs to (given up ones end one)
};

// cuDevicePrimaryCtxRetain, counted as one of the shim's references and held in `reference`.
CUresult retain_primary(CUcontext* primary, int device, PrimaryReference& reference) noexcept;

// cuDevicePrimaryCtxRelease of `reference`, unless it was given up since (then nothing); it holds
// none after.
void release_primary(PrimaryReference& reference) noexcept;

// Whether `reference` still holds its context: false once given up, or never taken.
bool still_held(const PrimaryReference& reference) noexcept;

// Gives back every reference the shim holds to `device`'s primary context and asks the driver
// whether the context is inactive now: true when it is (the driver reset it, the shim's being
// its last references), and they stay given up; false when someone else held it, or the driver
// did not say, and they are taken again. Retains and releases through here wait meanwhile.
bool reset_if_only_the_shim_holds(int device) noexcept;

}  // namespace vramspill::driver
