// SIMCUDA_STATS: simcuda's counters and modeled stream times as a JSON document, written when the
// process exits, so that policies can be compared without a GPU.
//
// Note [Statistics are modeled]
// Every time and traffic figure in the document comes from the cost model (core/traffic.h) and
// the configured bandwidths; none is measured. The document says so ("modeled": true and a
// note), and so must anything that reports its numbers.
//
// Layout (version 2; version 1 lacked host_modeled_seconds and remap_violations):
//   {"simcuda_stats_version": 2, "modeled": true, "note": "...",
//    "cost_model": {"hbm_bytes_per_second": ..., "link_bytes_per_second": ...},
//    "host_modeled_seconds": ..., "remap_violations": ...,
//    "devices": [{"ordinal", "total_bytes", "used_bytes", "peak_device_bytes",
//                 "link_bytes_copies", "link_bytes_zero_copy", "link_bytes_migrations",
//                 "device_bytes_touched", "managed_faults", "managed_evictions",
//                 "kernel_launches",
//                 "streams": [{"id", "kind", "modeled_seconds"}]}]}
// host_modeled_seconds is the latest modeled host clock (Note [Host clock] in host_clock.h);
// remap_violations counts the process's breaches of Note [Remap protocol] (remap_check.h).
// "kind" is "legacy_default", "per_thread_default" or "created". Streams are those of the
// contexts alive at exit (streams of destroyed contexts are gone with them), ordered by id.
#pragma once

#include <string>

namespace simcuda {

class Driver;

// The document for the current state. Safe while streams are still running: it reads counters
// and modeled clocks, which may then still change.
std::string stats_json(Driver& driver);

// After a successful cuInit: when SIMCUDA_STATS names a file, arranges for the document to be
// written there at exit (by the process that called cuInit, not by children it forks).
void register_stats_writer();

}  // namespace simcuda
