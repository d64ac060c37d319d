# The ways tiered mode moves blocks, for the tests that must keep every byte with each of them
# (tests/shim/tiered/, tests/shim/stress/). A run is one of:
#   safe      the remap mover in the safe window (Note [Remap window] in shim/core/remap_window.h)
#   tracked   the remap mover in the tracked window (Note [The tracked window] in
#             shim/placement/tracked_work.h)
#   prefetch  the prefetch mover, which has no window (Note [The prefetch mover] in
#             shim/placement/prefetch_placement.h)
include_guard(DIRECTORY)

set(TIERED_MOVER_RUNS safe tracked prefetch)

# tiered_mover_args(<variable> <run> [MOVED]): the check_output.py arguments (tests/shim/routes/)
# that make tiered mode move its blocks as <run> says, and check that it did: the prefetch mover
# must say its blocks are managed memory, make every one of them so and open no remap window.
# MOVED: the exit summary must count moves both ways, granules evicted and promoted or
# prefetches each way (none the driver refused), so a run that moved nothing cannot pass.
function(tiered_mover_args variable run)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "MOVED" "" "")
  if(run STREQUAL "prefetch")
    set(args --env VRAMSPILL_TIERED_MOVER=prefetch
        --expect "device 0: tiered blocks are managed memory moved by prefetches"
        --reject "prefetch mover could not make it managed memory"
        --expect " 0 remap windows ")
    set(moved "prefetch mover: [0-9.]+ [KMG]iB promoted in [1-9][0-9]* prefetches, [0-9.]+ [KMG]iB evicted in [1-9][0-9]* prefetches \\([0-9]+ in part\\), [0-9]+ promotions refused \\([0-9]+ held back by the card's free memory\\), [0-9]+ blocks promoted ahead of their launches, 0 prefetches the driver refused")
  elseif(run STREQUAL "safe" OR run STREQUAL "tracked")
    set(args --env VRAMSPILL_TIERED_MOVER=remap --env VRAMSPILL_TIERED_WINDOW=${run})
    set(moved "tiered: [0-9.]+ [KMG]iB evicted to the host in [1-9][0-9]* granules, [0-9.]+ [KMG]iB promoted to the device in [1-9][0-9]* granules")
  else()
    message(FATAL_ERROR "tiered_mover_args: no run '${run}' (one of ${TIERED_MOVER_RUNS})")
  endif()
  if(ARG_MOVED)
    list(APPEND args --expect ${moved})
  endif()
  set(${variable} ${args} PARENT_SCOPE)
endfunction()
