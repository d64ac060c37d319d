// What the placement tests share: fake tiers, fake driver facts, what the ledger recorded, and
// the shim's log captured per test.
#pragma once

#include <algorithm>

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/ledger.h"
#include "placement/spill_facts.h"
#include "telemetry/log.h"
#include "telemetry/rate_limit.h"
#include "tiers/host_vmm_tier.h"
#include "tiers/spill_tier.h"

namespace vramspill::placement {

// A spill tier that answers what the test sets and records what it was asked.
class FakeTier final : public tiers::SpillTier {
 public:
  FakeTier(const char* name, core::Route route, CUdeviceptr first_pointer)
      : SpillTier(name, route), next_pointer_(first_pointer) {}

  std::optional<bool> support = true;
  tiers::SpillOutcome
      answer{};  // what allocate() returns; on success a fresh pointer is handed out
  int support_queries = 0;
  std::vector<tiers::SpillAllocation> allocations;
  std::vector<CUdeviceptr> frees;
  std::vector<CUdeviceptr> stream_ordered_frees;
  std::function<void()> while_allocating;  // runs inside each allocate()
  std::vector<CUdeviceptr> kept_in_reset;  // forget_if_lost() calls the others lost

 private:
  std::optional<bool> do_query_support(int) noexcept override {
    ++support_queries;
    return support;
  }
  tiers::SpillOutcome do_allocate(const tiers::SpillAllocation& request,
                                  CUdeviceptr* out) noexcept override {
    allocations.push_back(request);
    if (while_allocating) while_allocating();
    if (answer.result == CUDA_SUCCESS) {
      *out = next_pointer_;
      next_pointer_ += request.bytes;
    }
    return answer;
  }
  CUresult do_free(CUdeviceptr pointer, uint64_t, int) noexcept override {
    frees.push_back(pointer);
    return CUDA_SUCCESS;
  }
  CUresult do_free_in_stream_order(CUdeviceptr pointer, uint64_t, int, CUstream) noexcept override {
    stream_ordered_frees.push_back(pointer);
    return CUDA_SUCCESS;
  }
  bool do_forget_if_lost(CUdeviceptr pointer, uint64_t) noexcept override {
    return std::find(kept_in_reset.begin(), kept_in_reset.end(), pointer) == kept_in_reset.end();
  }

  CUdeviceptr next_pointer_;
};

// A host-located VMM tier that answers what the test sets and records what it was asked.
class FakeHostVmmTier final : public tiers::HostVmmTier {
 public:
  std::optional<tiers::HostVmmLocation> answer =
      tiers::HostVmmLocation{.kind = tiers::HostVmmLocation::Kind::kHostNuma, .numa_node = 1};
  CUresult create_result = CUDA_SUCCESS;
  int location_queries = 0;
  std::vector<CUmemAllocationProp> created;
  std::vector<unsigned long long> created_flags;

 private:
  std::optional<tiers::HostVmmLocation> do_query_location(int) noexcept override {
    ++location_queries;
    return answer;
  }
  CUresult do_create(CUmemGenericAllocationHandle* out, uint64_t, const CUmemAllocationProp& prop,
                     unsigned long long flags) noexcept override {
    created.push_back(prop);
    created_flags.push_back(flags);
    if (create_result == CUDA_SUCCESS) *out = next_handle_++;
    return create_result;
  }

  CUmemGenericAllocationHandle next_handle_ = 0x5000;
};

class FakeFacts final : public SpillFacts {
 public:
  bool is_integrated = false;
  bool is_capturing = false;
  CUresult capture_query = CUDA_SUCCESS;
  int capture_queries = 0;
  int host_limit_refreshes = 0;

  bool integrated(int) noexcept override { return is_integrated; }
  CUresult capturing(CUstream, bool& capturing) noexcept override {
    ++capture_queries;
    capturing = is_capturing;
    return capture_query;
  }
  bool capture_in_progress() noexcept override { return capture_anywhere; }
  std::shared_lock<std::shared_mutex> hold_off_captures() noexcept override {
    return std::shared_lock(capture_gate);
  }
  std::shared_mutex capture_gate;
  void refresh_host_limit() noexcept override { ++host_limit_refreshes; }
  CUresult check_vmm_request(const CUmemAllocationProp&, uint64_t) noexcept override {
    return vmm_request_verdict;
  }
  bool capture_anywhere = false;
  CUresult vmm_request_verdict = CUDA_SUCCESS;
};

// What `ledger` records of `route` on device 0.
inline core::RouteSnapshot recorded(const core::Ledger& ledger, core::Route route) {
  return ledger.snapshot(0).routes[core::route_index(route)];
}

// Sends the shim's log (info and up) to a file of the running test's own, with every rate limit
// reset so that the test sees each line it causes.
class LogCapture {
 public:
  LogCapture() {
    path_ = ::testing::TempDir() + "vramspill_placement_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".log";
    std::filesystem::remove(path_);
    LogConfig log;
    log.level = LogLevel::kInfo;
    log.file = path_;
    logging::configure(log);
    reset_rate_limits();
  }

  std::string text() const {
    logging::flush();
    std::ifstream in(path_);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string path_;
};

}  // namespace vramspill::placement
