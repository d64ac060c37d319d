// The driver entry-point table: which exported function cuGetProcAddress hands out for a
// (name, requested version, stream kind), generated from the toolkit's cudaTypedefs.h by
// tools/simcuda/gen_proc_table.py.
//
// This header does not include cuda.h, because proc_table.cpp must not see cuda.h (it declares
// every export with one uniform signature; see there).
#pragma once

namespace simcuda {

enum class ProcLookupStatus {
  kFound,
  kSymbolNotFound,        // no driver function of that name
  kVersionNotSufficient,  // the function exists, but only in ABIs newer than the requested version
};

struct ProcLookup {
  ProcLookupStatus status = ProcLookupStatus::kSymbolNotFound;
  const char* export_name = nullptr;  // "cuMemAlloc_v2"; set when found
  void* address = nullptr;            // simcuda's own definition of export_name; set when found
};

// `per_thread`: the caller asked for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM; names with a
// _ptds/_ptsz ABI at or below `version` then answer that one. Lock-free and allocation-free: safe
// before cuInit and from any thread.
ProcLookup lookup_proc(const char* name, int version, bool per_thread) noexcept;

}  // namespace simcuda
