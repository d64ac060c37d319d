// The entry-point table behind cuGetProcAddress (see core/proc_table.h).
//
// This file must not include cuda.h. It takes the address of every export simcuda has, and
// those have some 640 different prototypes; here each is declared the same way,
// `extern "C" int name(void)`, which is all that taking an address needs. Every name gets a
// definition: a strong one where simcuda implements the function, otherwise the generated weak
// stub (generated/weak_stubs.cpp). Seeing two prototypes for one C symbol is harmless to the
// compiler and linker as long as no single translation unit sees both (it would refuse) and
// the library is not built with LTO (which compares them).

#include "core/proc_table.h"

#include <algorithm>
#include <string_view>

namespace {

using ExportFn = int (*)();

}  // namespace

// Protected, not default, visibility: the linker merges the visibility of every declaration of a
// symbol into the most restrictive one, so each export stays exported but simcuda's own
// references to it, this table's included, bind to simcuda's definition. Otherwise a library
// that exports the same names and comes first in the lookup order (the vramspill shim under
// LD_PRELOAD) would interpose, and cuGetProcAddress would return the shim's function instead of
// the driver's, which the real driver never does and which would make the shim wrap itself.
#define SIMCUDA_PROC_EXPORT(symbol) \
  extern "C" __attribute__((visibility("protected"))) int symbol(void);
#include "proc_table.inc"
#undef SIMCUDA_PROC_EXPORT

namespace simcuda {
namespace {

enum class ThreadKind : unsigned char { kNone, kPtds, kPtsz };

struct ProcRow {
  const char* name;         // what callers ask for: "cuMemcpyHtoD"
  int version;              // answered from this requested version on (until the next row)
  ThreadKind kind;          // kNone: legacy-stream ABI; otherwise a per-thread ABI
  const char* export_name;  // what they get: "cuMemcpyHtoD_v2_ptds"
  ExportFn address;
};

#define SIMCUDA_PT_NONE ThreadKind::kNone
#define SIMCUDA_PT_PTDS ThreadKind::kPtds
#define SIMCUDA_PT_PTSZ ThreadKind::kPtsz
#define SIMCUDA_PROC_ENTRY(name, version, kind, symbol) {name, version, kind, #symbol, &(symbol)},
// constexpr: the table is in read-only data from load time on, so lookups need no
// initialisation and work from whichever thread and constructor calls first.
constexpr ProcRow kRows[] = {
#include "proc_table.inc"
};
#undef SIMCUDA_PROC_ENTRY
#undef SIMCUDA_PT_NONE
#undef SIMCUDA_PT_PTDS
#undef SIMCUDA_PT_PTSZ

constexpr bool row_before(const ProcRow& a, const ProcRow& b) {
  const std::string_view a_name(a.name);
  const std::string_view b_name(b.name);
  return a_name != b_name ? a_name < b_name : a.version < b.version;
}
// The generator sorts the rows; lookup_proc's binary search and its "last row <= version" scan
// depend on that, so a generator change that broke it fails the build rather than a lookup.
static_assert(std::is_sorted(std::begin(kRows), std::end(kRows), row_before));

}  // namespace

ProcLookup lookup_proc(const char* name, int version, bool per_thread) noexcept {
  const std::string_view wanted(name);
  const ProcRow* first = std::lower_bound(
      std::begin(kRows), std::end(kRows), wanted,
      [](const ProcRow& row, std::string_view key) { return std::string_view(row.name) < key; });
  const ProcRow* last = first;
  while (last != std::end(kRows) && std::string_view(last->name) == wanted) ++last;
  if (first == last) return {ProcLookupStatus::kSymbolNotFound};

  // A name has a handful of rows in ascending version order; the last one at or below the
  // requested version is the answer. A per-thread request prefers a per-thread ABI and falls back
  // to the legacy one where none exists yet at that version (cuMemcpyHtoD at 3020).
  const ProcRow* best = nullptr;
  if (per_thread) {
    for (const ProcRow* row = first; row != last; ++row)
      if (row->kind != ThreadKind::kNone && row->version <= version) best = row;
  }
  if (best == nullptr) {
    for (const ProcRow* row = first; row != last; ++row)
      if (row->kind == ThreadKind::kNone && row->version <= version) best = row;
  }
  if (best == nullptr) return {ProcLookupStatus::kVersionNotSufficient};
  // Function pointer to void*: conditionally supported in C++, and exact on every ELF platform;
  // cuGetProcAddress's interface is void* anyway.
  return {ProcLookupStatus::kFound, best->export_name, reinterpret_cast<void*>(best->address)};
}

}  // namespace simcuda
