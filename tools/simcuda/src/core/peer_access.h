// Peer access between contexts of different simulated devices (cuCtxEnablePeerAccess), and the
// check that keeps a kernel out of another device's memory without it.
//
// Note [Peer access]
// simcuda models an NVLink-style node: any device can reach any other (cuDeviceCanAccessPeer is 1
// for two distinct devices, 0 for a device and itself, as in the driver). As on a GPU, a kernel
// reaches another device's cuMemAlloc memory only once its context has enabled access to a
// context of that device:
// - Access is one-way, from the current context to a peer context, and ends with
//   cuCtxDisablePeerAccess or when either context is destroyed (forget_peer_access()).
// - It opens the plain device memory (cuMemAlloc, cuMemAllocPitch: kind kDevice without a pool)
//   of the peer's device. The driver documents "all memory allocated in the peer context";
//   simcuda opens the memory the device's other contexts allocated too (with primary contexts,
//   the usual case, there is only one).
// - Other memory keeps its own rule. Managed and host memory (pinned, mapped, registered) is
//   reachable from every device. Pool blocks and graph allocations follow their pool's access
//   (cuMemPoolSetAccess, recorded but not enforced), VMM mappings cuMemSetAccess (Note [VMM
//   model] in vmm.h).
// - The check runs with the kernel, on the stream's worker thread, over the ranges the kernel
//   table says it touches (KernelDef::touches in kernels.h). A range that reaches such memory
//   without access makes the kernel fail with CUDA_ERROR_ILLEGAL_ADDRESS, like a bad pointer
//   (Note [Kernel faults] in kernel_fault.h), before it reads or writes anything.
// - Copies and memsets need no peer access: between devices the driver stages them through the
//   host when peer access is off.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

namespace simcuda {

struct Context;

// cuCtxEnablePeerAccess / cuCtxDisablePeerAccess of `peer` from `from`, once the caller checked
// that both are live contexts of different devices. CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED /
// CUDA_ERROR_PEER_ACCESS_NOT_ENABLED as the driver returns them.
CUresult enable_peer_access(const Context& from, const Context& peer);
CUresult disable_peer_access(const Context& from, const Context& peer);

// cuCtxDestroy of `context`: every access from it or to it ends.
void forget_peer_access(const Context& context);

// The first address of [address, address + size) that a kernel running in `from` may not touch:
// plain device memory of another device, to none of whose contexts `from` has peer access.
// nullopt when there is none. Addresses that no allocation holds are not this check's business:
// the kernel faults on them by itself.
std::optional<uint64_t> first_address_without_peer_access(const Context& from, uint64_t address,
                                                          uint64_t size);

}  // namespace simcuda
