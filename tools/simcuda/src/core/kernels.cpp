#include "core/kernels.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>

#include "core/device_memory.h"
#include "vs_touch.h"

// The host implementations below must stay in step with tools/simcuda/kernels/vs_kernels.cu:
// same names, same parameters in the same order, same results bit for bit.
namespace simcuda {
namespace {

// Grid and block dimensions are ignored: each implementation does the whole grid-stride loop.

bool aligned(uint64_t address, uint64_t alignment) { return address % alignment == 0; }

// Note [Kernel parameters]: each parameter at the next offset aligned to its alignment.
constexpr size_t abi_offset(std::span<const KernelParam> params, size_t index) {
  size_t offset = 0;
  for (size_t i = 0; i <= index; ++i) {
    const size_t alignment = params[i].alignment;
    offset = (offset + alignment - 1) / alignment * alignment;
    if (i < index) offset += params[i].size;
  }
  return offset;
}

// A scalar or a pointer: aligned to its size.
constexpr KernelParam scalar(const char* name, uint32_t size) { return {name, size, size}; }

// A count of `element` sized items as bytes, saturated: a garbage count must not wrap around
// into a small range (the kernel would then fault where the GPU does, at the first bad page).
uint64_t span_bytes(uint64_t count, uint64_t element) {
  return count > UINT64_MAX / element ? UINT64_MAX : count * element;
}

// --- vs_fill_u32(uint32_t* dst, uint32_t value, uint64_t count) ----------------------------------
constexpr std::array kFillParams{scalar("dst", 8), scalar("value", 4), scalar("count", 8)};
static_assert(abi_offset(kFillParams, 1) == 8 && abi_offset(kFillParams, 2) == 16);
struct FillArgs {
  uint64_t dst;
  uint32_t value;
  uint64_t count;
};
FillArgs fill_args(const KernelArgs& args) {
  return {args.at<uint64_t>(0), args.at<uint32_t>(8), args.at<uint64_t>(16)};
}

CUresult run_fill(const KernelArgs& args) {
  const FillArgs a = fill_args(args);
  if (a.count == 0) return CUDA_SUCCESS;
  if (!aligned(a.dst, alignof(uint32_t))) return CUDA_ERROR_MISALIGNED_ADDRESS;
  auto* dst = static_cast<uint32_t*>(device_view(a.dst));
  for (uint64_t i = 0; i < a.count; ++i) dst[i] = a.value;
  return CUDA_SUCCESS;
}

std::vector<MemoryRange> touches_fill(const KernelArgs& args) {
  const FillArgs a = fill_args(args);
  return {{a.dst, span_bytes(a.count, 4), Access::kWrite}};
}

// --- vs_copy(void* dst, const void* src, uint64_t bytes) -----------------------------------------
constexpr std::array kCopyParams{scalar("dst", 8), scalar("src", 8), scalar("bytes", 8)};
static_assert(abi_offset(kCopyParams, 1) == 8 && abi_offset(kCopyParams, 2) == 16);

CUresult run_copy(const KernelArgs& args) {
  const auto dst = args.at<uint64_t>(0);
  const auto src = args.at<uint64_t>(8);
  const auto bytes = args.at<uint64_t>(16);
  // memmove: overlapping ranges are a race on the GPU, but must not be undefined behaviour in
  // simcuda itself.
  if (bytes != 0) std::memmove(device_view(dst), device_view(src), bytes);
  return CUDA_SUCCESS;
}

std::vector<MemoryRange> touches_copy(const KernelArgs& args) {
  const auto bytes = args.at<uint64_t>(16);
  return {{args.at<uint64_t>(8), bytes, Access::kRead},
          {args.at<uint64_t>(0), bytes, Access::kWrite}};
}

// --- vs_axpy_f32(float* y, const float* x, float a, uint64_t n): y = a*x + y --------------------
constexpr std::array kAxpyParams{scalar("y", 8), scalar("x", 8), scalar("a", 4),
                                 scalar("n", 8)};
static_assert(abi_offset(kAxpyParams, 2) == 16 && abi_offset(kAxpyParams, 3) == 24);

CUresult run_axpy(const KernelArgs& args) {
  const auto y_address = args.at<uint64_t>(0);
  const auto x_address = args.at<uint64_t>(8);
  const auto a = args.at<float>(16);
  const auto n = args.at<uint64_t>(24);
  if (n == 0) return CUDA_SUCCESS;
  if (!aligned(y_address, alignof(float)) || !aligned(x_address, alignof(float)))
    return CUDA_ERROR_MISALIGNED_ADDRESS;
  auto* y = static_cast<float*>(device_view(y_address));
  const auto* x = static_cast<const float*>(device_view(x_address));
  // A multiply rounded, then an add rounded: the .cu kernel uses __fmul_rn/__fadd_rn so that
  // nvcc does not contract them into an FMA, and this file is compiled as ISO C++ (no GNU
  // extensions), where GCC does not contract either; the results match bit for bit.
  for (uint64_t i = 0; i < n; ++i) {
    const float product = a * x[i];
    y[i] = product + y[i];
  }
  return CUDA_SUCCESS;
}

std::vector<MemoryRange> touches_axpy(const KernelArgs& args) {
  const uint64_t bytes = span_bytes(args.at<uint64_t>(24), 4);
  const auto y = args.at<uint64_t>(0);
  return {{args.at<uint64_t>(8), bytes, Access::kRead},
          {y, bytes, Access::kRead},
          {y, bytes, Access::kWrite}};
}

// --- vs_touch(uint64_t* bare, uint64_t bare_words, VsTouchList list, uint64_t stamp) ----------
// Every element of each block: x[i] = x[i] * kVsTouchMultiplier + stamp + i (vs_touch.h).
constexpr std::array kTouchParams{
    scalar("bare", 8), scalar("bare_words", 8),
    KernelParam{"list", sizeof(VsTouchList), alignof(VsTouchList)}, scalar("stamp", 8)};
static_assert(abi_offset(kTouchParams, 2) == 16 && abi_offset(kTouchParams, 3) == 3864);

// The blocks one launch touches: the bare one first, then the list's entries.
struct TouchTarget {
  uint64_t address;
  uint64_t words;
};
struct TouchArgs {
  std::array<TouchTarget, kVsTouchListCapacity + 1> targets;
  size_t count;  // targets used, with 0 words or not
  uint64_t stamp;
};
TouchArgs touch_args(const KernelArgs& args) {
  constexpr size_t list = abi_offset(kTouchParams, 2);
  TouchArgs a{};
  a.targets[0] = {args.at<uint64_t>(0), args.at<uint64_t>(8)};
  // Read as the .cu kernel does: a count past the capacity means the whole list.
  const auto count = std::min<uint64_t>(args.at<uint64_t>(list), kVsTouchListCapacity);
  for (size_t entry = 0; entry < count; ++entry)
    a.targets[entry + 1] = {args.at<uint64_t>(list + offsetof(VsTouchList, data) + entry * 8),
                            args.at<uint64_t>(list + offsetof(VsTouchList, words) + entry * 8)};
  a.count = count + 1;
  a.stamp = args.at<uint64_t>(abi_offset(kTouchParams, 3));
  return a;
}

CUresult run_touch(const KernelArgs& args) {
  const TouchArgs a = touch_args(args);
  for (size_t target = 0; target < a.count; ++target) {
    const auto [address, words] = a.targets[target];
    if (words == 0) continue;
    if (!aligned(address, 8)) return CUDA_ERROR_MISALIGNED_ADDRESS;
    auto* x = static_cast<uint64_t*>(device_view(address));
    for (uint64_t i = 0; i < words; ++i) x[i] = vs_touch_element(x[i], a.stamp, i);
  }
  return CUDA_SUCCESS;
}

std::vector<MemoryRange> touches_touch(const KernelArgs& args) {
  const TouchArgs a = touch_args(args);
  std::vector<MemoryRange> ranges;
  for (size_t target = 0; target < a.count; ++target) {
    const auto [address, words] = a.targets[target];
    if (words == 0) continue;
    const uint64_t bytes = span_bytes(words, 8);
    ranges.push_back({address, bytes, Access::kRead});
    ranges.push_back({address, bytes, Access::kWrite});
  }
  return ranges;
}

constexpr std::array kTable{
    KernelDef{"vs_fill_u32", kFillParams, run_fill, touches_fill},
    KernelDef{"vs_copy", kCopyParams, run_copy, touches_copy},
    KernelDef{"vs_axpy_f32", kAxpyParams, run_axpy, touches_axpy},
    KernelDef{"vs_touch", kTouchParams, run_touch, touches_touch},
};

}  // namespace

std::span<const KernelDef> kernel_table() { return kTable; }

const KernelDef* find_kernel(std::string_view name) {
  for (const KernelDef& kernel : kTable)
    if (name == kernel.name) return &kernel;
  return nullptr;
}

size_t param_offset(const KernelDef& kernel, size_t index) {
  return abi_offset(kernel.params, index);
}

size_t param_buffer_size(const KernelDef& kernel) {
  if (kernel.params.empty()) return 0;
  const size_t last = kernel.params.size() - 1;
  return param_offset(kernel, last) + kernel.params[last].size;
}

}  // namespace simcuda
