#!/usr/bin/env python3
"""Generate simcuda's driver entry-point table from the CUDA toolkit's own headers.

Inputs (all from --include-dir):
  cudaTypedefs.h, cudaProfilerTypedefs.h  one `PFN_<name>_v<ver>[_ptds|_ptsz]` typedef per ABI of
                                          every driver function: the versions that exist
  cuda.h                                  `#define <name> <export>` for the current ABI, and the
                                          CUresult enum

Outputs (into --out-dir):
  proc_table.inc   X-macro list: every export symbol, and every (name, version, stream kind) ->
                   export row, sorted for binary search (see src/core/proc_table.cpp)
  weak_stubs.cpp   a weak definition returning CUDA_ERROR_NOT_SUPPORTED for every export, so every
                   lookup lands on a real exported symbol even where simcuda has no implementation
  error_names.inc  the CUresult codes with their names and a description derived from the name

The export-name rule was checked against all 440 lookups cudart 13.0.88 makes against the real
driver (tests/data/cudart-13.0.88-driver-lookups.txt); see resolve() below.
"""

import argparse
import os
import re
import sys

PER_THREAD_KINDS = {"ptds": "SIMCUDA_PT_PTDS", "ptsz": "SIMCUDA_PT_PTSZ"}


def read_header(include_dir, name):
    with open(os.path.join(include_dir, name), encoding="utf-8") as f:
        text = f.read()
    # Comments may mention typedef-like or #define-like text; only code counts.
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


class Function:
    """What the headers say about one driver function name (e.g. "cuMemcpyHtoD")."""

    def __init__(self, name):
        self.name = name
        self.versions = set()       # versions with a plain (legacy-stream) ABI
        self.per_thread = {}        # version -> "ptds" / "ptsz"
        self.define_target = None   # cuda.h's `#define name target`, when it names an ABI of name


def collect_functions(include_dir):
    functions = {}
    # Parse every typedef regardless of #if blocks: the legacy ABIs (cuMemAlloc_v2000, ...) sit
    # under __CUDA_API_VERSION_INTERNAL, and the driver exports them all the same.
    typedef = re.compile(r"\bPFN_(cu\w+)_v(\d+)(?:_(ptds|ptsz))?\s*\)")
    for header in ("cudaTypedefs.h", "cudaProfilerTypedefs.h"):
        for name, version, kind in typedef.findall(read_header(include_dir, header)):
            fn = functions.setdefault(name, Function(name))
            if kind:
                fn.per_thread[int(version)] = kind
            else:
                fn.versions.add(int(version))

    define = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(cu\w+)[ \t]+"
                        r"(?:__CUDA_API_PT(?:DS|SZ)\(\s*(\w+)\s*\)|(\w+))[ \t]*$", re.M)
    for name, wrapped, plain in define.findall(read_header(include_dir, "cuda.h")):
        target = wrapped or plain
        fn = functions.get(name)
        # Only a define naming a versioned ABI of the same function says which export is
        # current. `#define cuGraphInstantiate cuGraphInstantiateWithFlags` is a source-level
        # rename, and `#define cuStreamGetCtx __CUDA_API_PTSZ(cuStreamGetCtx)` only adds the
        # per-thread suffix: cuStreamGetCtx's 12050 ABI is still exported as cuStreamGetCtx_v2.
        if fn is None or not re.fullmatch(re.escape(name) + r"_v\d+", target):
            continue
        if fn.define_target not in (None, target):
            sys.exit(f"gen_proc_table: conflicting #defines for {name}: {fn.define_target}, {target}")
        fn.define_target = target

    for fn in functions.values():
        if not fn.versions:
            sys.exit(f"gen_proc_table: {fn.name} has only per-thread typedefs")
        if len(set(fn.per_thread.values())) > 1:
            sys.exit(f"gen_proc_table: {fn.name} mixes _ptds and _ptsz typedefs")
    return functions


def resolve(fn, requested, per_thread):
    """The export the driver hands out for cuGetProcAddress(fn.name, requested, flags).

    The highest plain ABI version <= requested wins. The i-th ABI (0-based, ascending) is exported
    as name (i == 0) or name_v{i+1}, except that the latest one is whatever cuda.h's #define names
    (cuCtxCreate's four ABIs are cuCtxCreate, _v2, _v3, _v4; cuGetProcAddress@12000 is _v2).
    A per-thread lookup appends _ptds/_ptsz once a per-thread typedef exists at <= requested.
    Returns None when no ABI is old enough.
    """
    versions = sorted(fn.versions)
    eligible = [v for v in versions if v <= requested]
    if not eligible:
        return None
    index = len(eligible) - 1
    if index == len(versions) - 1 and fn.define_target:
        export = fn.define_target
    else:
        export = fn.name if index == 0 else f"{fn.name}_v{index + 1}"
    if per_thread:
        kinds = [kind for version, kind in fn.per_thread.items() if version <= requested]
        if kinds:
            export += "_" + kinds[0]
    return export


def table_rows(functions):
    """(name, version, kind, export) rows: the answer changes only at a header-listed version, so
    a row at each such version, and a lookup takes the last row <= the requested version."""
    rows = []
    for fn in functions.values():
        for version in sorted(fn.versions):
            rows.append((fn.name, version, "SIMCUDA_PT_NONE", resolve(fn, version, False)))
        previous = None
        for version in sorted(fn.versions | set(fn.per_thread)):
            export = resolve(fn, version, True)
            kind = export.rsplit("_", 1)[-1] if export else None
            if kind in PER_THREAD_KINDS and export != previous:
                rows.append((fn.name, version, PER_THREAD_KINDS[kind], export))
                previous = export
    # Byte order, as strcmp sees it, for the binary search in proc_table.cpp.
    rows.sort(key=lambda row: (row[0].encode(), row[1], row[2]))
    return rows


def cuda_results(include_dir):
    text = read_header(include_dir, "cuda.h")
    body = re.search(r"typedef\s+enum\s+cudaError_enum\s*\{(.*?)\}\s*CUresult\s*;", text, re.S)
    if not body:
        sys.exit("gen_proc_table: CUresult enum not found in cuda.h")
    results = [(name, int(value)) for name, value in
               re.findall(r"\b(CUDA_\w+)\s*=\s*(\d+)", body.group(1))]
    return sorted(results, key=lambda result: result[1])


def describe(result_name):
    # Our own wording, derived from the name: CUDA_ERROR_OUT_OF_MEMORY -> "out of memory".
    if result_name == "CUDA_SUCCESS":
        return "no error"
    return result_name.removeprefix("CUDA_ERROR_").replace("_", " ").lower()


HEADER = "// Generated by tools/simcuda/gen_proc_table.py from the CUDA toolkit headers. Do not edit."


def proc_table_inc(rows):
    exports = sorted({row[3] for row in rows})
    lines = [HEADER,
             "// X-macro lists for src/core/proc_table.cpp, which defines the macros it needs.",
             "// SIMCUDA_PROC_EXPORT(symbol): every distinct export symbol, once.",
             "// SIMCUDA_PROC_ENTRY(name, version, kind, symbol): cuGetProcAddress(name) at a",
             "//   requested version >= version answers symbol, until the name's next row of the",
             "//   same kind. Sorted by name (strcmp order), then version.",
             "#ifdef SIMCUDA_PROC_EXPORT"]
    lines += [f"SIMCUDA_PROC_EXPORT({export})" for export in exports]
    lines += ["#endif", "", "#ifdef SIMCUDA_PROC_ENTRY"]
    lines += [f'SIMCUDA_PROC_ENTRY("{name}", {version}, {kind}, {export})'
              for name, version, kind, export in rows]
    lines += ["#endif", ""]
    return "\n".join(lines)


def weak_stubs_cpp(rows, not_supported):
    exports = sorted({row[3] for row in rows})
    lines = [HEADER,
             "// A weak definition of every export in the entry-point table, returning",
             "// CUDA_ERROR_NOT_SUPPORTED: every cuGetProcAddress answer is then a real exported",
             "// symbol, the one the driver would name, and the strong definitions simcuda implements",
             "// elsewhere in the library replace these at link time.",
             "//",
             "// cuda.h is deliberately not included: its prototypes differ from function to function,",
             "// and one uniform `int f(void)` keeps this file generic. A caller passing arguments to",
             "// a function that takes none is harmless in the SysV x86-64 and AAPCS64 ABIs (arguments",
             "// travel in registers the callee ignores; the caller owns any stack it pushed), and",
             "// CUresult is an int-sized enum returned in the integer return register.",
             "// Clang's -fsanitize=function (part of -fsanitize=undefined) checks exactly that",
             "// mismatch at indirect calls through cuGetProcAddress's pointers; it is waived for",
             "// the stubs, where it is intended. GCC has no such check (nor the attribute's name).",
             "",
             "#if defined(__clang__)",
             "#define SIMCUDA_STUB_SIGNATURE_UNCHECKED __attribute__((no_sanitize(\"function\")))",
             "#else",
             "#define SIMCUDA_STUB_SIGNATURE_UNCHECKED",
             "#endif",
             "#define SIMCUDA_WEAK_STUB \\",
             "  extern \"C\" __attribute__((weak, visibility(\"default\"))) SIMCUDA_STUB_SIGNATURE_UNCHECKED",
             ""]
    lines += [f"SIMCUDA_WEAK_STUB int {export}(void) {{ return {not_supported}; }}"
              for export in exports]
    lines.append("")
    return "\n".join(lines)


def error_names_inc(results):
    lines = [HEADER,
             "// { code, name, description } for every CUresult, sorted by code. The descriptions",
             "// are derived from the names, not NVIDIA's wording.",
             ""]
    lines += [f'{{ {name}, "{name}", "{describe(name)}" }},' for name, _ in results]
    lines.append("")
    return "\n".join(lines)


def write(path, text):
    # Always rewritten, never skipped when unchanged: the build reruns this script whenever an
    # output is older than the script, so an output left with its old timestamp would make every
    # build regenerate.
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--include-dir", required=True, help="directory holding cuda.h")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()

    rows = table_rows(collect_functions(args.include_dir))
    results = cuda_results(args.include_dir)
    not_supported = dict(results)["CUDA_ERROR_NOT_SUPPORTED"]

    os.makedirs(args.out_dir, exist_ok=True)
    write(os.path.join(args.out_dir, "proc_table.inc"), proc_table_inc(rows))
    write(os.path.join(args.out_dir, "weak_stubs.cpp"), weak_stubs_cpp(rows, not_supported))
    write(os.path.join(args.out_dir, "error_names.inc"), error_names_inc(results))


if __name__ == "__main__":
    main()
