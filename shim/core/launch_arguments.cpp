#include "core/launch_arguments.h"

#include <cstring>

namespace vramspill::core {
namespace {

constexpr size_t kWordBytes = 8;

size_t entry_index(uintptr_t function) noexcept {
  return static_cast<size_t>((static_cast<uint64_t>(function) * 0x9E3779B97F4A7C15) >> 57) %
         ParamLayoutCache::kEntries;
}

// Every parameter through `info`, until it answers CUDA_ERROR_INVALID_VALUE (no such index).
template <typename Handle>
ArgumentsRead query_layout_with(CUresult (*info)(Handle, size_t, size_t*, size_t*), Handle handle,
                                ParamLayout& layout) noexcept {
  layout.count = 0;
  for (size_t index = 0;; ++index) {
    size_t offset = 0, size = 0;
    const CUresult result = info(handle, index, &offset, &size);
    if (result == CUDA_ERROR_INVALID_VALUE) return ArgumentsRead::kRead;
    if (result != CUDA_SUCCESS || offset > UINT16_MAX || size > UINT16_MAX)
      return ArgumentsRead::kLayoutRefused;
    if (index == ParamLayout::kMaxParams) return ArgumentsRead::kTooManyParameters;
    layout.params[index] = {static_cast<uint16_t>(offset), static_cast<uint16_t>(size)};
    layout.count = static_cast<uint32_t>(index + 1);
  }
}

// Note [Kernels launched as functions]: the function's query, then the kernel's.
ArgumentsRead query_layout(CUfunction function, const LayoutQueries& queries,
                           ParamLayout& layout) noexcept {
  if (queries.function == nullptr && queries.kernel == nullptr)
    return ArgumentsRead::kNoLayoutQuery;
  const auto as_kernel = reinterpret_cast<CUkernel>(function);
  if (queries.function != nullptr) {
    const ArgumentsRead read = query_layout_with(queries.function, function, layout);
    if (queries.kernel == nullptr) return read;
    if (read == ArgumentsRead::kRead && layout.count == 0) {
      // No parameters, or a CUkernel taken for a function without any: a kernel query that
      // refuses the handle says which, and any other failure of it stands.
      ParamLayout kernel_layout;
      const ArgumentsRead as_kernel_read =
          query_layout_with(queries.kernel, as_kernel, kernel_layout);
      if (as_kernel_read == ArgumentsRead::kRead) layout = kernel_layout;
      return as_kernel_read == ArgumentsRead::kLayoutRefused ? ArgumentsRead::kRead
                                                             : as_kernel_read;
    }
    if (read != ArgumentsRead::kLayoutRefused) return read;
  }
  return query_layout_with(queries.kernel, as_kernel, layout);
}

// The packed buffer of `extra`, as one run of its whole words.
ArgumentsRead extra_words(void** extra, LaunchWords& words) noexcept {
  const void* buffer = nullptr;
  size_t size = 0;
  for (void** pair = extra; *pair != CU_LAUNCH_PARAM_END; pair += 2) {
    if (pair[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = pair[1];
    } else if (pair[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (pair[1] == nullptr) return ArgumentsRead::kUnknownExtraKey;
      std::memcpy(&size, pair[1], sizeof size);
    } else {
      return ArgumentsRead::kUnknownExtraKey;
    }
  }
  if (buffer != nullptr && size >= kWordBytes)
    words.runs[words.count++] = {buffer, size / kWordBytes};
  return ArgumentsRead::kRead;
}

}  // namespace

std::optional<ArgumentsRead> ParamLayoutCache::find(const Entry& entry, uintptr_t function,
                                                    uint32_t generation,
                                                    ParamLayout& layout) const noexcept {
  const uint32_t version = entry.version.load(std::memory_order_acquire);
  if ((version & 1) != 0 || entry.function.load(std::memory_order_acquire) != function ||
      entry.generation.load(std::memory_order_acquire) != generation)
    return std::nullopt;
  const uint32_t count = entry.count.load(std::memory_order_acquire);
  if (count == kTooManyParameters) {
    if (entry.version.load(std::memory_order_relaxed) != version) return std::nullopt;
    return ArgumentsRead::kTooManyParameters;
  }
  if (count > ParamLayout::kMaxParams) return std::nullopt;
  layout.count = count;
  for (uint32_t index = 0; index < layout.count; ++index) {
    const uint32_t packed = entry.params[index].load(std::memory_order_acquire);
    layout.params[index] = {static_cast<uint16_t>(packed >> 16),
                            static_cast<uint16_t>(packed & 0xFFFF)};
  }
  if (entry.version.load(std::memory_order_relaxed) != version) return std::nullopt;
  return ArgumentsRead::kRead;
}

void ParamLayoutCache::store(Entry& entry, uintptr_t function, uint32_t generation,
                             uint32_t count, const ParamLayout& layout) noexcept {
  uint32_t version = entry.version.load(std::memory_order_relaxed);
  if ((version & 1) != 0 ||
      !entry.version.compare_exchange_strong(version, version + 1, std::memory_order_acquire))
    return;  // another thread is writing it
  entry.function.store(function, std::memory_order_release);
  entry.generation.store(generation, std::memory_order_release);
  entry.count.store(count, std::memory_order_release);
  const uint32_t stored = count == kTooManyParameters ? 0 : count;
  for (uint32_t index = 0; index < stored; ++index)
    entry.params[index].store(
        static_cast<uint32_t>(layout.params[index].offset) << 16 | layout.params[index].size,
        std::memory_order_release);
  entry.version.store(version + 2, std::memory_order_release);
}

ArgumentsRead ParamLayoutCache::layout(CUfunction function, const LayoutQueries& queries,
                                       ParamLayout& layout) noexcept {
  const auto key = reinterpret_cast<uintptr_t>(function);
  const uint32_t generation = generation_.load(std::memory_order_relaxed);
  Entry& entry = entries_[entry_index(key)];
  if (const std::optional<ArgumentsRead> cached = find(entry, key, generation, layout))
    return *cached;
  const ArgumentsRead read = query_layout(function, queries, layout);
  if (read == ArgumentsRead::kRead) store(entry, key, generation, layout.count, layout);
  if (read == ArgumentsRead::kTooManyParameters)
    store(entry, key, generation, kTooManyParameters, layout);
  return read;
}

ArgumentsRead argument_words(CUfunction function, void** kernel_params, void** extra,
                             ParamLayoutCache& cache, const LayoutQueries& queries,
                             LaunchWords& words) noexcept {
  words.count = 0;
  if (kernel_params == nullptr)
    return extra == nullptr ? ArgumentsRead::kRead : extra_words(extra, words);
  ParamLayout layout;
  if (const ArgumentsRead read = cache.layout(function, queries, layout);
      read != ArgumentsRead::kRead)
    return read;
  for (uint32_t index = 0; index < layout.count; ++index) {
    const ParamLayout::Param& param = layout.params[index];
    if (param.offset % kWordBytes != 0 || param.size < kWordBytes ||
        kernel_params[index] == nullptr)
      continue;
    words.runs[words.count++] = {kernel_params[index], param.size / kWordBytes};
  }
  return ArgumentsRead::kRead;
}

const char* describe(ArgumentsRead read) noexcept {
  switch (read) {
    case ArgumentsRead::kRead:
      return "read";
    case ArgumentsRead::kNoLayoutQuery:
      return "the driver has neither cuFuncGetParamInfo nor cuKernelGetParamInfo (before CUDA "
             "12.4)";
    case ArgumentsRead::kLayoutRefused:
      return "the driver's layout queries refused the handle";
    case ArgumentsRead::kTooManyParameters:
      return "the kernel has more parameters than the shim reads (512)";
    case ArgumentsRead::kUnknownExtraKey:
      return "the launch's `extra` holds a key the shim does not know";
  }
  return "unknown";
}

}  // namespace vramspill::core
