// A kernel launch's arguments as the 8-byte words use tracking looks up (core/use_tracker.h).
// Driver-free: where each parameter lies comes through seams with the signatures of
// cuFuncGetParamInfo and cuKernelGetParamInfo, so unit tests drive the decoding with fake
// layouts and real parameter buffers.
//
// Note [Reading a launch's arguments]
// cuLaunchKernel takes either kernelParams, one pointer per parameter to its value, or `extra`,
// one packed buffer laid out as the kernel's parameter space (CU_LAUNCH_PARAM_BUFFER_POINTER and
// CU_LAUNCH_PARAM_BUFFER_SIZE). A device pointer is 8 bytes at an 8-byte aligned offset of that
// space, alone or inside a struct, so the words looked up are:
// - from `extra`: every aligned word of the buffer, no layout needed;
// - from kernelParams: each parameter's aligned words, its size and offset from the driver's
//   layout query (a parameter that is not 8-byte aligned, or smaller than 8 bytes, holds no
//   pointer). Only the parameter's own bytes are read, never past them.
// The words are not copied: the tracker reads them where the program put them (runs of words,
// one per parameter), so a parameter space of any size up to the driver's 32764 bytes (PyTorch's
// multi-tensor kernels pass structs of about 4 KiB full of pointers) costs no allocation and no
// stack beyond one pointer and length per parameter.
// Pointer-sized integers that happen to fall inside a tracked range count as uses: harmless (a
// block looks used), where missing a pointer would remap memory under a running kernel.
//
// Note [Kernels launched as functions]
// The launch calls take a CUfunction, and the CUDA runtime passes them CUkernel handles (from
// cuLibraryGetKernel: every kernel of a framework, cuBLAS included). cuFuncGetParamInfo refuses
// a CUkernel with CUDA_ERROR_INVALID_HANDLE; cuKernelGetParamInfo reads it (both since CUDA 12.4,
// measured on an H200 with CUDA 13.0). So the layout is asked of cuFuncGetParamInfo first and,
// when it refuses the handle, of cuKernelGetParamInfo; a handle is one or the other, and the
// cache keeps a layout whichever query gave it (and that a kernel has more than kMaxParams
// parameters, which no launch of it changes). A function the first query finds without
// parameters is asked of the second as well: a driver that answered a CUkernel's first query as
// it answers a function's past its last parameter (CUDA_ERROR_INVALID_VALUE, not the
// CUDA_ERROR_INVALID_HANDLE measured) would otherwise have its launches touch nothing, and tiered
// mode would move their blocks under them. cuKernelGetFunction then cuFuncGetParamInfo
// would also work, but needs a current context and is one call more.
// A launch whose layout still cannot be read (neither query exists, as before CUDA 12.4; both
// refuse the handle; more than kMaxParams parameters; an `extra` key this does not know) may
// touch everything: the caller records it so (UseTracker::record_unreadable_launch), which
// counts it. A null kernelParams, or a null pointer in it, is the driver's to refuse: it is not
// read.
//
// Note [The parameter layout cache]
// cuFuncGetParamInfo is one driver call per parameter, and every launch needs the layout, so it
// is cached per CUfunction in a direct-mapped table of fixed size: no allocation, no lock. Each
// entry is a sequence lock: a writer makes its version odd with a compare-and-swap (a second
// writer of the same entry gives up: the value is only a cache), writes, and makes it even; a
// reader copies the entry and keeps the copy only if the version was even and unchanged. The
// fields are written with release stores and read with acquire loads (no fences, which
// ThreadSanitizer cannot follow): a reader that sees any field a writer wrote therefore also sees
// that writer's odd version when it reads the version again, and drops the copy. A
// CUfunction's value may be reused after its module or library is unloaded, so the unload hooks
// call forget_all(), which moves the cache to a new generation: entries of older ones miss.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/use_tracker.h"

namespace vramspill::core {

// The driver's layout queries (Note [Kernels launched as functions]); null where the driver
// lacks one.
struct LayoutQueries {
  CUresult (*function)(CUfunction function, size_t index, size_t* offset,
                       size_t* size) = nullptr;  // cuFuncGetParamInfo
  CUresult (*kernel)(CUkernel kernel, size_t index, size_t* offset,
                     size_t* size) = nullptr;  // cuKernelGetParamInfo
};

// Whether a launch's arguments could be read, and if not, why (for the log).
enum class ArgumentsRead : uint8_t {
  kRead,
  kNoLayoutQuery,      // the driver has neither layout query (before CUDA 12.4)
  kLayoutRefused,      // every query the driver has refused the handle
  kTooManyParameters,  // more than ParamLayout::kMaxParams
  kUnknownExtraKey,    // an `extra` key this does not know
};
const char* describe(ArgumentsRead read) noexcept;

// Where a kernel's parameters lie in its parameter space.
struct ParamLayout {
  // torch.compile's foreach kernels (a compiled optimizer step) take up to 370 parameters, most
  // of them pointers (Inductor's MAX_NUM_ARGS), and Triton adds its own; a launch of more is
  // unreadable, so touches everything. 512 costs 8 KiB of stack a launch (LaunchWords) and
  // 256 KiB for the cache.
  static constexpr size_t kMaxParams = 512;
  // No default member initialisers: a layout is built on every launch, and clearing all
  // kMaxParams entries would cost more than reading the few that are set.
  struct Param {
    uint16_t offset;  // the parameter space is at most 32764 bytes
    uint16_t size;
  };
  uint32_t count = 0;
  std::array<Param, kMaxParams> params;  // [0, count) set; not cleared on the launch path
};

// Note [The parameter layout cache].
class ParamLayoutCache {
 public:
  static constexpr size_t kEntries = 128;

  // The layout, from the cache or (then cached) through `queries`.
  ArgumentsRead layout(CUfunction function, const LayoutQueries& queries,
                       ParamLayout& layout) noexcept;
  // A module or library is being unloaded: its CUfunction values may come back for others.
  void forget_all() noexcept { generation_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // An entry's count for a function with more than kMaxParams parameters.
  static constexpr uint32_t kTooManyParameters = UINT32_MAX;
  struct alignas(64) Entry {
    std::atomic<uint32_t> version{0};  // odd while being written
    std::atomic<uint32_t> generation{0};
    std::atomic<uintptr_t> function{0};
    std::atomic<uint32_t> count{0};  // or kTooManyParameters
    std::array<std::atomic<uint32_t>, ParamLayout::kMaxParams> params{};  // offset << 16 | size
  };

  // The layout cached for `function` (kRead), that it has too many parameters, or nullopt when
  // the entry holds neither.
  std::optional<ArgumentsRead> find(const Entry& entry, uintptr_t function, uint32_t generation,
                                    ParamLayout& layout) const noexcept;
  // `count`: the layout's, or kTooManyParameters (and no parameter is stored).
  void store(Entry& entry, uintptr_t function, uint32_t generation, uint32_t count,
             const ParamLayout& layout) noexcept;

  std::atomic<uint32_t> generation_{1};  // entries start at 0: never a hit
  std::array<Entry, kEntries> entries_{};
};

// A launch's arguments as runs of words in the program's own argument memory (Note [Reading a
// launch's arguments]): valid while the launch call runs. One run per parameter, or one for the
// packed buffer of `extra`.
struct LaunchWords {
  uint32_t count = 0;
  std::array<WordRun, ParamLayout::kMaxParams> runs;  // [0, count) set; not cleared

  std::span<const WordRun> view() const noexcept { return {runs.data(), count}; }
};

// Fills `words` with the aligned 8-byte words of a cuLaunchKernel-style launch's arguments (Note
// [Reading a launch's arguments]). Anything but kRead: the launch may touch everything.
ArgumentsRead argument_words(CUfunction function, void** kernel_params, void** extra,
                             ParamLayoutCache& cache, const LayoutQueries& queries,
                             LaunchWords& words) noexcept;

}  // namespace vramspill::core
