#include "device_player.h"

#include <algorithm>
#include <optional>

#include "driver_calls.h"
#include "util/bytes.h"

namespace vramspill::player {
namespace {

constexpr size_t kStagingBytes = size_t{64} << 20;
constexpr unsigned kThreadsPerBlock = 256;
constexpr unsigned kMaxGridX = 1024;  // a grid-stride loop covers the rest
constexpr size_t kBlocksPerKernel = kVsTouchListCapacity + 1;

// A stamp per kernel, so that no two touches are alike (splitmix64).
uint64_t stamp_of(uint64_t kernel) {
  uint64_t x = kernel + 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Note [Streams and order]: the driver's own stream a trace's stream number names, if any.
std::optional<CUstream> driver_stream(uint64_t number) {
  for (const CUstream stream : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD})
    if (number == reinterpret_cast<uintptr_t>(stream)) return stream;
  return std::nullopt;
}

}  // namespace

DevicePlayer::DevicePlayer(const Plan& plan, DeviceSettings settings)
    : plan_(plan), settings_(settings), blocks_(plan.blocks.size()), verifier_(kStagingBytes) {
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device_, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  char name[256] = {};
  check(cuDeviceGetName(name, sizeof name, device_), "cuDeviceGetName");
  device_name_ = name;
  size_t total = 0;
  check(cuDeviceTotalMem(&total, device_), "cuDeviceTotalMem");
  device_bytes_ = total;
  if (settings_.kernels != nullptr) {
    check(cuLibraryLoadFromFile(&library_, settings_.kernels, nullptr, nullptr, 0, nullptr,
                                nullptr, 0),
          "cuLibraryLoadFromFile", [&] { return std::string(settings_.kernels); });
  } else {
    check(cuLibraryLoadData(&library_, "simcuda accepts any image", nullptr, nullptr, 0, nullptr,
                            nullptr, 0),
          "cuLibraryLoadData",
          [] { return std::string("a placeholder image (on a GPU, pass --kernels)"); });
  }
  check(cuLibraryGetKernel(&kernel_, library_, "vs_touch"), "cuLibraryGetKernel(vs_touch)");
  for (const uint64_t number : plan.streams) {
    const std::optional<CUstream> driver_owned = driver_stream(number);
    CUstream handle = driver_owned.value_or(nullptr);
    if (!driver_owned) check(cuStreamCreate(&handle, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    streams_.push_back(handle);
    created_.push_back(!driver_owned);
    for (auto* events : {&handoff_events_, &step_events_}) {
      check(cuEventCreate(&events->emplace_back(), CU_EVENT_DEFAULT), "cuEventCreate");
    }
  }
  // Note [Streams and order]: each block's fill goes on the stream of its first launch.
  std::vector<bool> launched(blocks_.size(), false);
  for (const PlannedAction& action : plan.actions) {
    if (action.kind != PlannedAction::Kind::kLaunch) continue;
    for (uint32_t i = 0; i < action.block_count; ++i) {
      const uint32_t block = plan.launch_blocks[action.first_block + i];
      if (!launched[block]) blocks_[block].home_stream = action.stream;
      launched[block] = true;
    }
  }
  check(cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
  check(cuEventRecord(start_, streams_.empty() ? nullptr : streams_[0]), "cuEventRecord");
}

DevicePlayer::~DevicePlayer() {
  // Best effort: the process is ending, and a failure here changes nothing it reported.
  cuCtxSynchronize();
  for (const Block& block : blocks_)
    if (block.address != 0) cuMemFree(block.address);
  for (size_t i = 0; i < streams_.size(); ++i) {
    cuEventDestroy(handoff_events_[i]);
    cuEventDestroy(step_events_[i]);
    if (created_[i]) cuStreamDestroy(streams_[i]);
  }
  if (start_ != nullptr) cuEventDestroy(start_);
  if (library_ != nullptr) cuLibraryUnload(library_);
  if (context_ != nullptr) cuDevicePrimaryCtxRelease(device_);
}

void DevicePlayer::play(const PlannedAction& action) {
  switch (action.kind) {
    case PlannedAction::Kind::kAlloc: return allocate(action.block);
    case PlannedAction::Kind::kFree: return free(action.block);
    case PlannedAction::Kind::kLaunch: return launch(action);
  }
}

void DevicePlayer::allocate(uint32_t index) {
  Block& block = blocks_[index];
  const uint64_t bytes = plan_.blocks[index].bytes;
  const auto purpose = [&] {
    return "block " + std::to_string(index) + " (" + format_bytes(bytes) + ", event " +
           std::to_string(plan_.blocks[index].event) + ")";
  };
  check(cuMemAlloc(&block.address, bytes), "cuMemAlloc", purpose);
  // Never 0, which is what fresh memory often holds: a fill that did not happen must show.
  block.contents = {static_cast<unsigned char>(1 + index % 255), VsTouchMap{}};
  block.last_stream = block.home_stream;
  const CUstream home = streams_.empty() ? nullptr : stream(block.home_stream);
  check(cuMemsetD8Async(block.address, block.contents.fill, bytes, home), "cuMemsetD8Async",
        purpose);
}

void DevicePlayer::free(uint32_t index) {
  Block& block = blocks_[index];
  if (settings_.verify_at_free) verify(index, true);
  check(cuMemFree(block.address), "cuMemFree",
        [&] { return "block " + std::to_string(index); });
  block.address = 0;
}

void DevicePlayer::launch(const PlannedAction& action) {
  const std::span<const uint32_t> named(plan_.launch_blocks.data() + action.first_block,
                                        action.block_count);
  wait_for_other_streams(named, action.stream);
  const bool first_bare = trace_launches_ % 2 == 0;
  size_t first = 0;
  do {  // once at least: a launch that names no block is still a launch
    launch_kernel(named.subspan(first, std::min(kBlocksPerKernel, named.size() - first)),
                  first_bare, action.stream);
    first += kBlocksPerKernel;
  } while (first < named.size());
  for (const uint32_t block : named) blocks_[block].last_stream = action.stream;
  ++trace_launches_;
}

void DevicePlayer::wait_for_other_streams(std::span<const uint32_t> blocks, uint32_t stream) {
  std::vector<bool> waited(streams_.size(), false);
  for (const uint32_t block : blocks) {
    const uint32_t other = blocks_[block].last_stream;
    if (other == stream || waited[other]) continue;
    waited[other] = true;
    check(cuEventRecord(handoff_events_[other], streams_[other]), "cuEventRecord");
    check(cuStreamWaitEvent(streams_[stream], handoff_events_[other], 0), "cuStreamWaitEvent");
  }
}

void DevicePlayer::launch_kernel(std::span<const uint32_t> blocks, bool first_bare,
                                 uint32_t stream) {
  unsigned long long* bare = nullptr;
  unsigned long long bare_words = 0;
  VsTouchList list{};
  uint64_t most_words = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uint64_t words = plan_.blocks[blocks[i]].bytes / 8;
    auto* address = reinterpret_cast<unsigned long long*>(blocks_[blocks[i]].address);
    most_words = std::max(most_words, words);
    if (i == 0 && first_bare) {
      bare = address;
      bare_words = words;
    } else {
      list.data[list.count] = address;
      list.words[list.count] = words;
      ++list.count;
    }
  }
  unsigned long long stamp = stamp_of(kernel_launches_);
  void* params[] = {&bare, &bare_words, &list, &stamp};
  const auto grid_x = static_cast<unsigned>(
      std::clamp<uint64_t>((most_words + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxGridX));
  const auto grid_y = static_cast<unsigned>(list.count + 1);
  auto* function = reinterpret_cast<CUfunction>(kernel_);  // as cudart passes a CUkernel
  const auto purpose = [&] { return "trace launch " + std::to_string(trace_launches_ + 1); };
  if ((kernel_launches_ / 2) % 2 == 0) {
    check(cuLaunchKernel(function, grid_x, grid_y, 1, kThreadsPerBlock, 1, 1, 0,
                         streams_[stream], params, nullptr),
          "cuLaunchKernel(vs_touch)", purpose);
  } else {
    CUlaunchConfig config{};
    config.gridDimX = grid_x;
    config.gridDimY = grid_y;
    config.gridDimZ = 1;
    config.blockDimX = kThreadsPerBlock;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.hStream = streams_[stream];
    check(cuLaunchKernelEx(&config, function, params, nullptr), "cuLaunchKernelEx(vs_touch)",
          purpose);
  }
  for (const uint32_t block : blocks) blocks_[block].contents.map.touch(stamp);
  ++kernel_launches_;
}

double DevicePlayer::end_step() {
  float end_ms = last_step_end_ms_;
  for (size_t i = 0; i < streams_.size(); ++i) {
    check(cuEventRecord(step_events_[i], streams_[i]), "cuEventRecord");
    check(cuEventSynchronize(step_events_[i]), "cuEventSynchronize");
    float ms = 0;
    check(cuEventElapsedTime(&ms, start_, step_events_[i]), "cuEventElapsedTime");
    end_ms = std::max(end_ms, ms);
  }
  const double step_ms = end_ms - last_step_end_ms_;
  last_step_end_ms_ = end_ms;
  return step_ms;
}

std::string DevicePlayer::corrupt_one_element() {
  for (auto index = static_cast<uint32_t>(blocks_.size()); index-- > 0;) {
    const uint64_t words = plan_.blocks[index].bytes / 8;
    if (blocks_[index].address == 0 || words == 0) continue;
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    const CUdeviceptr last = blocks_[index].address + (words - 1) * 8;
    uint64_t value = 0;
    check(cuMemcpyDtoH(&value, last, sizeof value), "cuMemcpyDtoH");
    value ^= 1;
    check(cuMemcpyHtoD(last, &value, sizeof value), "cuMemcpyHtoD");
    return "block " + std::to_string(index) + " element " + std::to_string(words - 1);
  }
  throw DriverError("the self-test needs a live block of at least 8 bytes at the end");
}

void DevicePlayer::verify_live_blocks() {
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  for (uint32_t index = 0; index < blocks_.size(); ++index)
    if (blocks_[index].address != 0) verify(index, false);
}

size_t DevicePlayer::live_blocks() const {
  return static_cast<size_t>(std::count_if(blocks_.begin(), blocks_.end(),
                                           [](const Block& block) { return block.address != 0; }));
}

void DevicePlayer::verify(uint32_t index, bool at_free) {
  const Block& block = blocks_[index];
  const CUstream last = streams_.empty() ? nullptr : stream(block.last_stream);
  if (const auto mismatch =
          verifier_.verify(block.address, plan_.blocks[index].bytes, block.contents, last))
    failures_.push_back({index, at_free, *mismatch});
  ++blocks_verified_;
}

}  // namespace vramspill::player
