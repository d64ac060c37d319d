// The driver side of the workload player: a plan's allocations, frees and launches made on
// device 0, each launch timed into its step, every block's contents predicted and verified.
//
// Note [How a launch is played]
// Each launch of the trace becomes vs_touch (tools/simcuda/kernels/vs_touch.h) over the blocks
// it names, launched as cudart launches a framework's kernels: the kernel is a CUkernel from
// cuLibraryLoadData (cuLibraryLoadFromFile with --kernels), passed to cuLaunchKernel or
// cuLaunchKernelEx as the CUfunction, with kernelParams. Launches alternate, so that both routes
// and both places of a pointer are exercised whatever the trace: the first block is a bare
// parameter in even launches and a list entry in odd ones (the others are always in the list),
// and launches 0, 1 go through cuLaunchKernel, 2, 3 through cuLaunchKernelEx, and so on. A launch
// that names more blocks than one kernel holds (1 + kVsTouchListCapacity) is played as several.
// Each kernel has its own stamp, so every touch changes every element differently.
//
// Note [Streams and order]
// The trace's stream numbers are the recorded job's CUstream values: 0 (the legacy default
// stream), CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are played on those streams, and every
// other number on a stream the player creates, non-blocking, so that nothing orders it but what
// the player asks. A trace does not record the job's waits between streams; the player makes a
// launch wait (an event recorded on the other stream) for the last launch of each of its blocks
// that ran on another stream, as the job must have, or the two kernels would race on the block
// and its bytes would depend on the race. A block's fill (cuMemsetD8Async at its allocation) is
// queued on the stream of its first launch (the trace's first stream if it has none), and its
// verification copies on the stream of its last one.
//
// Note [Timing a step]
// At each step's end the player records an event on every stream and waits for them all, as a
// training loop that reads its loss once a step waits for the device: the step's time is from
// the previous step's latest end to this one's, by cuEventElapsedTime, so it is measured on a
// GPU and modeled on simcuda (its cost model, never a measurement). The first step also holds
// the fills of the blocks allocated in it. Verification at frees (Note [Verifying]) is inside
// the steps; the final verification is after the last.
//
// Note [Verifying]
// Every block the trace frees is copied back and checked before cuMemFree (unless
// --no-verify-at-free), and every block live at the end after the last step, byte by byte
// (verifier.h). A mismatch is recorded with its block and element and the play goes on, so that
// the report lists every bad block.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "play_plan.h"
#include "verifier.h"

namespace vramspill::player {

struct DeviceSettings {
  const char* kernels = nullptr;  // a module image with vs_touch; nullptr: simcuda's (any image)
  bool verify_at_free = true;
};

struct VerificationFailure {
  uint32_t block = 0;
  bool at_free = false;
  Mismatch mismatch;
};

class DevicePlayer {
 public:
  // Opens device 0, loads the kernel and makes the plan's streams. Throws DriverError.
  DevicePlayer(const Plan& plan, DeviceSettings settings);
  ~DevicePlayer();
  DevicePlayer(const DevicePlayer&) = delete;
  DevicePlayer& operator=(const DevicePlayer&) = delete;

  const std::string& device_name() const { return device_name_; }
  uint64_t device_bytes() const { return device_bytes_; }
  // simcuda, whose times are modeled; otherwise a driver whose times are measured.
  bool simulated() const { return device_name_.rfind("simcuda", 0) == 0; }

  // One action of the plan (Note [How a launch is played]). Throws DriverError.
  void play(const PlannedAction& action);
  // Ends a step: its time in milliseconds (Note [Timing a step]).
  double end_step();

  // Flips one bit of the last element of the last live block allocated; says which, as
  // "block B element E". For the self-test: verification must then fail there.
  std::string corrupt_one_element();
  // Verifies every live block (Note [Verifying]).
  void verify_live_blocks();

  const std::vector<VerificationFailure>& failures() const { return failures_; }
  uint64_t kernel_launches() const { return kernel_launches_; }
  uint64_t bytes_verified() const { return verifier_.bytes_verified(); }
  size_t blocks_verified() const { return blocks_verified_; }
  size_t live_blocks() const;

 private:
  struct Block {
    CUdeviceptr address = 0;  // 0 when not live
    BlockContents contents;
    uint32_t home_stream = 0;  // of its first launch (Note [Streams and order])
    uint32_t last_stream = 0;
  };

  CUstream stream(uint32_t index) const { return streams_[index]; }
  void allocate(uint32_t block);
  void free(uint32_t block);
  void launch(const PlannedAction& action);
  void wait_for_other_streams(std::span<const uint32_t> blocks, uint32_t stream);
  void launch_kernel(std::span<const uint32_t> blocks, bool first_bare, uint32_t stream);
  void verify(uint32_t block, bool at_free);

  const Plan& plan_;
  DeviceSettings settings_;
  CUcontext context_ = nullptr;
  CUdevice device_ = 0;
  CUlibrary library_ = nullptr;
  CUkernel kernel_ = nullptr;
  std::string device_name_;
  uint64_t device_bytes_ = 0;
  std::vector<CUstream> streams_;        // per plan stream
  std::vector<bool> created_;            // made by the player (destroyed at the end)
  std::vector<CUevent> handoff_events_;  // per plan stream: what another stream waits on
  std::vector<CUevent> step_events_;     // per plan stream: each step's end
  CUevent start_ = nullptr;
  float last_step_end_ms_ = 0;
  std::vector<Block> blocks_;
  uint64_t trace_launches_ = 0;
  uint64_t kernel_launches_ = 0;
  Verifier verifier_;
  size_t blocks_verified_ = 0;
  std::vector<VerificationFailure> failures_;
};

}  // namespace vramspill::player
