#include "tiers/numa_policy.h"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace vramspill::tiers {
namespace {

constexpr unsigned long kBitsPerWord = sizeof(unsigned long) * 8;

long get_mempolicy(int* mode, unsigned long* mask, unsigned long max_node) {
  return syscall(SYS_get_mempolicy, mode, mask, max_node, nullptr, 0UL);
}

// The kernel reads max_node - 1 bits of the mask (a historical off-by-one every caller
// compensates for), hence the + 1.
long set_mempolicy(int mode, const unsigned long* mask, unsigned long bits) {
  return syscall(SYS_set_mempolicy, mode, mask, bits + 1);
}

}  // namespace

ScopedPreferredNode::ScopedPreferredNode(int node) noexcept {
  constexpr unsigned long kBits = kMaskWords * kBitsPerWord;
  if (node < 0 || static_cast<unsigned long>(node) >= kBits) return;
  if (get_mempolicy(&saved_mode_, saved_mask_, kBits) != 0) {
    error_ = errno;
    return;
  }
  unsigned long mask[kMaskWords] = {};
  mask[static_cast<unsigned long>(node) / kBitsPerWord] =
      1UL << (static_cast<unsigned long>(node) % kBitsPerWord);
  if (set_mempolicy(MPOL_PREFERRED, mask, kBits) != 0) {
    error_ = errno;
    return;
  }
  active_ = true;
}

ScopedPreferredNode::~ScopedPreferredNode() {
  if (!active_) return;
  // Mode flags (static / relative nodes) come back in the mode word and go in with it.
  const int saved_errno = errno;
  set_mempolicy(saved_mode_, saved_mode_ == MPOL_DEFAULT ? nullptr : saved_mask_,
                saved_mode_ == MPOL_DEFAULT ? 0 : kMaskWords * kBitsPerWord);
  errno = saved_errno;
}

}  // namespace vramspill::tiers
