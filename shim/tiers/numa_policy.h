// Placing pinned memory on the GPU's NUMA node, the one CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID names
// (shim/README.md, "Budgets and honesty").
//
// Note [Pinned pages on the GPU's node]
// cuMemHostAlloc takes no NUMA node: the driver allocates and touches the pages itself, so they
// land where the *calling thread's* memory policy says. The shim's pin function therefore wraps
// its cuMemHostAlloc in a ScopedPreferredNode for the node the device reports (set_mempolicy
// MPOL_PREFERRED: prefer that node, fall back to others rather than fail when it is full). The
// pool pins from whichever thread needs memory (an allocating thread, or its background thread),
// which is why the scope lives in the pin function and not in the pool. Without libnuma: these
// are two system calls, and a DT_NEEDED on libnuma would enter every preloaded process.
// Containers often forbid the calls (Docker's default seccomp profile allows them only with
// CAP_SYS_NICE); then the scope is inactive, pinning still works, and the caller logs once that
// placement is up to the kernel.
#pragma once

namespace vramspill::tiers {

class ScopedPreferredNode {
 public:
  // node < 0 (the device reports none, or the platform is not NUMA) does nothing.
  explicit ScopedPreferredNode(int node) noexcept;
  ~ScopedPreferredNode();
  ScopedPreferredNode(const ScopedPreferredNode&) = delete;
  ScopedPreferredNode& operator=(const ScopedPreferredNode&) = delete;

  // Whether the preference is in force (false when node < 0 or the kernel refused).
  bool active() const noexcept { return active_; }
  // The errno of a refused set_mempolicy, for the caller's log line; 0 otherwise.
  int error() const noexcept { return error_; }

 private:
  static constexpr int kMaskWords = 16;  // 1024 nodes, the kernel's largest MAX_NUMNODES

  bool active_ = false;
  int error_ = 0;
  int saved_mode_ = 0;
  unsigned long saved_mask_[kMaskWords] = {};
};

}  // namespace vramspill::tiers
