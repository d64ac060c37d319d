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
bool query_layout(CUfunction function, ParamInfoFunction info, ParamLayout& layout) noexcept {
  if (info == nullptr) return false;
  layout.count = 0;
  for (size_t index = 0;; ++index) {
    size_t offset = 0, size = 0;
    const CUresult result = info(function, index, &offset, &size);
    if (result == CUDA_ERROR_INVALID_VALUE) return true;
    if (result != CUDA_SUCCESS || index == ParamLayout::kMaxParams || offset > UINT16_MAX ||
        size > UINT16_MAX)
      return false;
    layout.params[index] = {static_cast<uint16_t>(offset), static_cast<uint16_t>(size)};
    layout.count = static_cast<uint32_t>(index + 1);
  }
}

bool append(ArgumentWords& words, const void* bytes, size_t size) noexcept {
  const size_t count = size / kWordBytes;
  if (count > ArgumentWords::kMaxWords - words.count) return false;
  // Word by word: a copy of constant size is a load and a store, where one of `size` bytes
  // would be a call into the C library for each parameter (most are a single word).
  const auto* source = static_cast<const unsigned char*>(bytes);
  for (size_t index = 0; index < count; ++index)
    std::memcpy(&words.words[words.count + index], source + index * kWordBytes, kWordBytes);
  words.count += count;
  return true;
}

// The packed buffer of `extra`; false for a key this does not know.
bool extra_words(void** extra, ArgumentWords& words) noexcept {
  const void* buffer = nullptr;
  size_t size = 0;
  for (void** pair = extra; *pair != CU_LAUNCH_PARAM_END; pair += 2) {
    if (pair[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = pair[1];
    } else if (pair[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (pair[1] == nullptr) return false;
      std::memcpy(&size, pair[1], sizeof size);
    } else {
      return false;
    }
  }
  return buffer == nullptr || append(words, buffer, size);
}

}  // namespace

bool ParamLayoutCache::find(const Entry& entry, uintptr_t function, uint32_t generation,
                            ParamLayout& layout) const noexcept {
  const uint32_t version = entry.version.load(std::memory_order_acquire);
  if ((version & 1) != 0 || entry.function.load(std::memory_order_acquire) != function ||
      entry.generation.load(std::memory_order_acquire) != generation)
    return false;
  layout.count = entry.count.load(std::memory_order_acquire);
  if (layout.count > ParamLayout::kMaxParams) return false;
  for (uint32_t index = 0; index < layout.count; ++index) {
    const uint32_t packed = entry.params[index].load(std::memory_order_acquire);
    layout.params[index] = {static_cast<uint16_t>(packed >> 16),
                            static_cast<uint16_t>(packed & 0xFFFF)};
  }
  return entry.version.load(std::memory_order_relaxed) == version;
}

void ParamLayoutCache::store(Entry& entry, uintptr_t function, uint32_t generation,
                             const ParamLayout& layout) noexcept {
  uint32_t version = entry.version.load(std::memory_order_relaxed);
  if ((version & 1) != 0 ||
      !entry.version.compare_exchange_strong(version, version + 1, std::memory_order_acquire))
    return;  // another thread is writing it
  entry.function.store(function, std::memory_order_release);
  entry.generation.store(generation, std::memory_order_release);
  entry.count.store(layout.count, std::memory_order_release);
  for (uint32_t index = 0; index < layout.count; ++index)
    entry.params[index].store(
        static_cast<uint32_t>(layout.params[index].offset) << 16 | layout.params[index].size,
        std::memory_order_release);
  entry.version.store(version + 2, std::memory_order_release);
}

bool ParamLayoutCache::layout(CUfunction function, ParamInfoFunction info,
                              ParamLayout& layout) noexcept {
  const auto key = reinterpret_cast<uintptr_t>(function);
  const uint32_t generation = generation_.load(std::memory_order_relaxed);
  Entry& entry = entries_[entry_index(key)];
  if (find(entry, key, generation, layout)) return true;
  if (!query_layout(function, info, layout)) return false;
  store(entry, key, generation, layout);
  return true;
}

bool argument_words(CUfunction function, void** kernel_params, void** extra,
                    ParamLayoutCache& cache, ParamInfoFunction info,
                    ArgumentWords& words) noexcept {
  words.count = 0;
  if (kernel_params == nullptr) return extra == nullptr || extra_words(extra, words);
  ParamLayout layout;
  if (!cache.layout(function, info, layout)) return false;
  for (uint32_t index = 0; index < layout.count; ++index) {
    const ParamLayout::Param& param = layout.params[index];
    if (param.offset % kWordBytes != 0 || kernel_params[index] == nullptr) continue;
    if (!append(words, kernel_params[index], param.size)) return false;
  }
  return true;
}

}  // namespace vramspill::core
