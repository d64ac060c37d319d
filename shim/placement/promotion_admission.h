// Whether a promotion the policy asks for is worth the bytes it moves, with the prefetch mover
// (Note [Admitting a promotion]). Pure books: block ids, launch sequence numbers and bytes in, a
// yes or no out, no driver; placement/prefetch_placement.h asks it before a promotion evicts.
//
// Note [Admitting a promotion]
// With the prefetch mover a block the policy leaves on the host is still reached: kernels read
// it in place over the link, one crossing of the bytes they touch. Bringing it in costs its
// bytes in, and the room for it its victims' bytes out, on the mover's streams, before the
// launch that needs it may run (Note [Two lanes] in placement/prefetch_placement.h). So a
// promotion that evicts pays only when the block is used on the device more than its victims
// would have been, by enough to pay for the move: a block used once while resident (a KV cache
// entry read once a step, a loop over more than fits) crosses twice where reading it in place
// crosses once, and every policy that promotes on use (lru, fifo, largest) turned such a loop
// into a move in and a move out per use: 2-3x managed mode's modeled step on the inference and
// random workloads of tests/shim/tiered/compare_movers.py.
// The mover therefore admits such a promotion as TinyLFU does (Einziger et al., "TinyLFU: A
// Highly Efficient Cache Admission Policy", 2017), weighed by bytes since a block's in-place cost
// is its bytes: each block keeps a count of its uses that halves every kHalfLife launches, and
// the candidate's count before the launch at hand, times its bytes, must beat the sum of its
// victims' counts times theirs by the bytes the move crosses (its own and its victims', one use's
// worth each). A promotion into free room evicts nothing and is always admitted. Consequences:
// - A new block has no uses: it takes free room only, so a job whose blocks are used alike
//   keeps the blocks it placed first on the device, as managed mode does, and reads the rest in
//   place.
// - In a loop, the victim a recency policy picks was used after the candidate last was, so it
//   counts at least as much: nothing is admitted and what is on the device stays there. (Counting
//   the launch at hand would admit every candidate against a victim not used since.)
// - A block used more often than the blocks it displaces, by enough, comes in.
// The policy still picks the victims and may refuse a promotion. A policy that plans with when
// each block is used next (learned, once it has locked on the job's period:
// EvictionPolicy::knows_next_uses()) already weighs a promotion against what its victims are
// needed for, as Belady's MIN with bypass does, and its promotions are not second-guessed: a
// training step's blocks are used in bursts (a layer's activations by the next few launches,
// forward and backward), which pay for a move, while use counts see a loop in which every block
// is used about as often. Held to admission, learned took 1.00x managed mode's modeled step on
// the training workload at 1.5x instead of 0.38x; trusted only while locked, rather than once it
// has locked, 992 ms a step on the H200 trace's workload player instead of 324 (the launches
// that break a lock are moments of a periodic job, and its promotions then are lru's).
// Measured (modeled, simcuda; README, "The prefetch mover"): on compare_movers.py's workloads at
// a 16 MiB budget, lru went from 2.89x managed mode's step to 0.85x on inference and from 2.13x
// to 1.00x on random access. The price is the promotions that the bursts of a loop paid for:
// lru on the training workload at 1.5x went from 1.29x to 1.00x but at 3x from 0.91x to 0.96x,
// lfu at 3x from 1.06x to 1.04x (a few early swaps leave a placement slightly worse than
// managed's, and admission then keeps it), and lru on the H200 trace from 703 ms a step to 1975
// (managed: 4803). Use counts cannot see a burst coming; learned can.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>

namespace vramspill::placement {

class PromotionAdmission {
 public:
  // Launches after which a use counts half (Note [Admitting a promotion]).
  static constexpr double kHalfLife = 32;

  // A block that would leave the device, and its bytes.
  struct Victim {
    uint64_t block = 0;
    uint64_t bytes = 0;
  };

  // `block` was used by the launch of sequence `sequence`; told after that launch's decisions.
  void used(uint64_t block, uint64_t sequence);
  // `block` was freed.
  void forget(uint64_t block) { counts_.erase(block); }

  // Whether bringing `candidate` (of `bytes`) in is worth evicting `victims`; always when there
  // are none.
  bool admits(uint64_t candidate, uint64_t bytes, std::span<const Victim> victims) const;

 private:
  struct Count {
    double uses = 0;  // as of `at`
    uint64_t at = 0;  // the sequence of the last use
  };
  // `block`'s uses as of launch `now`, each halved every kHalfLife launches since.
  double count(uint64_t block, uint64_t now) const;

  std::unordered_map<uint64_t, Count> counts_;
  // The highest sequence told. Every count is decayed to it: as all decay alike, the comparison
  // is the same as of any later launch.
  uint64_t latest_ = 0;
};

}  // namespace vramspill::placement
