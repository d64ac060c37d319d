// The shim's process-wide state and the guard every hook enters through.
//
// Note [Entering the shim]
// Nothing happens when the library is loaded: a process that never touches CUDA (a shell, a
// data-loader worker) runs exactly as without the preload. The first hooked call initialises
// the shim once: it reads the configuration, sets up the log, and registers the fork handler
// and the exit summary. Each hook then holds an Entry for the length of the call:
// - A hook entered while the same thread is already inside the shim (logging, or a driver that
//   calls back through its own exports) gets no state and forwards straight to the driver.
// - In a forked child the shim is pass-through: the ledger describes the parent's memory.
// - With an invalid configuration the shim does not guess: cuInit fails (see
//   configuration_error()) and every other hook forwards to the driver.
// State is created once and never destroyed: threads may still allocate while the process exits.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "config/config.h"
#include "core/capture_gate.h"
#include "core/ledger.h"
#include "core/host_allocations.h"
#include "core/host_budget.h"
#include "core/graph_uses.h"
#include "core/launch_arguments.h"
#include "core/use_tracker.h"
#include "core/vmm_tracker.h"
#include "core/remap_window.h"
#include "hooks/driver_spill_facts.h"
#include "hooks/driver_stream_order.h"
#include "hooks/driver_tiered_seam.h"
#include "hooks/pool_tracking.h"
#include "hooks/prefetch_devices.h"
#include "hooks/submission_events.h"
#include "hooks/tiered_arenas.h"
#include "placement/admission_flow.h"
#include "placement/ledger_tiered_budgets.h"
#include "placement/prefetch_placement.h"
#include "placement/spill_placement.h"
#include "placement/stream_ordered_blocks.h"
#include "placement/tiered_blocks.h"
#include "placement/tiered_placement.h"
#include "placement/tiered_rules.h"
#include "placement/vmm_books.h"
#include "placement/vmm_spill.h"
#include "telemetry/trace_file.h"
#include "tiers/driver_host_vmm_tier.h"
#include "tiers/host_tier.h"
#include "tiers/managed_tier.h"
#include "tiers/stream_ordered_frees.h"
#include "tiers/stream_ordered_reuse.h"

namespace vramspill::hooks {

// Frees `device`'s tiered block at `base` at once (hooks/tiered_allocation.cpp): what
// ShimState::tiered_frees' thread calls once the block's stream is past its cuMemFreeAsync.
CUresult free_tiered_block_now(void* shim, CUdeviceptr base, uint64_t bytes, int device);

struct ShimState {
  explicit ShimState(const Config& loaded) noexcept;
  ShimState(const ShimState&) = delete;
  ShimState& operator=(const ShimState&) = delete;

  Config config;
  core::Ledger ledger;
  core::VmmTracker vmm;
  core::HostBudget host_budget;  // pinned + managed bytes, against [spill] host_limit
  core::HostAllocations program_pinned;  // the program's own page-locked memory
  // The stream captures in progress (hooks/capture_hooks.cpp) and the gate that holds new ones
  // off (Note [The capture gate]).
  core::CaptureGate captures;
  tiers::ManagedTier managed;
  tiers::HostTier host;
  tiers::DriverHostVmmTier host_vmm;
  DriverSpillFacts spill_facts;
  placement::SpillPlacement spill;  // where what does not fit goes
  placement::VmmSpill vmm_spill;    // where a cuMemCreate that does not fit goes
  core::UseTracker use;  // which tracked blocks each submission touches (hooks/use_tracking.h)
  core::ParamLayoutCache launch_layouts;  // kernel parameter layouts, per CUfunction
  core::GraphExecUses graph_uses;  // what each executable graph touches (hooks/graph_hooks.cpp)
  // Tiered mode (placement/tiered_blocks.h, hooks/tiered_allocation.h).
  core::RemapWindow window;      // Note [Remap window]
  placement::LedgerTieredBudgets tiered_budgets;
  DriverArenaSource arenas;
  placement::TieredPlacement tiered;
  // With [tiered] mover = "prefetch", the blocks that are managed memory (Note [The prefetch
  // mover] in placement/prefetch_placement.h); a device it cannot serve uses `tiered`.
  DriverPrefetchDevices prefetch_devices;
  placement::PrefetchPlacement prefetch;
  placement::TieredRules tiered_rules;  // [[tiered.rule]], over config.tiered.rules
  placement::NativeCallSites call_sites;  // the stacks tiered_rules match
  // Tiered blocks and their books (Note [A tiered block in the books]).
  placement::TieredBlocks tiered_blocks;
  DriverTieredSeam tiered_seam{*this};
  DriverPoolDriver pool_driver{captures};
  // Every allocation and free once its hook has entered (hooks/admission.h).
  placement::AdmissionFlow admission{
      config.spill, ledger, pool_books(), pool_driver, spill, vmm_spill, tiered_seam};
  // The program's VMM handles once made: their references, mappings and frees.
  placement::VmmBooks vmm_books{ledger, vmm, admission, vmm_spill, host_budget};
  DriverSubmissionEvents submission_events;
  // Every submission's way to the driver in tiered mode (Note [One way through for a
  // submission] in placement/submission_order.h).
  placement::SubmissionOrder submissions;
  // cuMemFreeAsync of a tiered block (Note [Stream-ordered frees on the shim's thread]).
  tiers::StreamOrderedFrees tiered_frees{this, &free_tiered_block_now, &captures};
  // Stream-ordered requests' tiered blocks, and those freed for reuse (Note [Reuse in stream
  // order] in tiers/stream_ordered_reuse.h).
  tiers::StreamOrderedReuse tiered_reuse;
  DriverStreamOrder stream_order{captures};
  // Which kept block serves a stream-ordered request, and which go back to the arena (Note
  // [Stream-ordered requests in the arena] in placement/stream_ordered_blocks.h).
  placement::StreamOrderedBlocks stream_ordered_blocks{
      config, ledger, tiered_budgets, tiered_blocks, pool_books(), tiered_reuse, stream_order};
  telemetry::TraceFile trace;  // [trace] file, told of events once open (start_trace())
};

// The state once initialised; null before, with an invalid configuration, and in a forked child.
// For the submission hooks, whose fast path is a load or two and no Entry (hooks/use_tracking.h).
inline constinit std::atomic<ShimState*> initialised_state{nullptr};

class Entry {
 public:
  Entry() noexcept;
  ~Entry();
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  // Null when the call must go straight to the driver.
  ShimState* state() const { return state_; }

 private:
  ShimState* state_ = nullptr;
  bool outermost_ = false;
};

// With [spill] host_limit as a percent, re-reads the memory available to the job, at most once a
// second, and sets the host budget's limit from it (Note [A percent host limit follows the
// container] in shim_state.cpp).
void refresh_host_limit(ShimState& shim) noexcept;

// The configuration error that disabled the shim, or null. Initialises the shim if needed.
const std::string* configuration_error() noexcept;

// What the job leaves when it ends, once, at exit or at a signal that ends it (Note [A signal
// that ends the job] in hooks/ending_signals.h), whichever comes first: the stats file removed,
// the trace's launches and end, the exit summary. The other, coming while they are written, waits
// for them (up to kLastWordsDeadline), so that neither a signal's default action nor the end of
// exit() cuts them off.
void write_last_words(ShimState& shim) noexcept;

// Whether the process has begun to exit (the shim's exit handler ran): its books no longer matter.
bool exit_begun() noexcept;

// How long the last words may hold a job that is ending (Note [A signal that ends the job] in
// hooks/ending_signals.h).
inline constexpr std::chrono::seconds kLastWordsDeadline{2};

}  // namespace vramspill::hooks
