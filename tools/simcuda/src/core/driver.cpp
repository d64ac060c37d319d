#include "core/driver.h"

#include <cstdio>
#include <mutex>
#include <string_view>

#include "core/api.h"
#include "core/context.h"
#include "core/stats.h"

namespace simcuda {
namespace {

std::atomic<Driver*> the_driver{nullptr};
std::once_flag init_once;
CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;

// "cuMemAlloc_v2_ptsz" -> "cuMemAlloc": the base name a rule without a suffix matches.
std::string_view base_name(std::string_view name) {
  for (std::string_view suffix : {"_ptsz", "_ptds"})
    if (name.ends_with(suffix)) name.remove_suffix(suffix.size());
  const size_t version = name.rfind("_v");
  if (version != std::string_view::npos && version + 2 < name.size() &&
      name.find_first_not_of("0123456789", version + 2) == std::string_view::npos)
    name = name.substr(0, version);
  return name;
}

}  // namespace

Driver::Driver(Config config)
    : config_(std::move(config)),
      fault_calls_(std::make_unique<std::atomic<uint64_t>[]>(config_.faults.size())) {
  for (int ordinal = 0; ordinal < config_.device_count; ++ordinal) {
    devices_.push_back(std::make_unique<Device>(
        ordinal, config_.vram_bytes, DeviceAttributes(ordinal, config_.attribute_overrides)));
    auto* primary = new Context(devices_.back().get(), 0, /*primary_=*/true);
    register_primary_context(primary);
    devices_.back()->set_primary_context(primary);
  }
}

Driver* Driver::instance() { return the_driver.load(std::memory_order_acquire); }

CUresult Driver::initialize() {
  std::call_once(init_once, [] {
    ConfigResult parsed = config_from_environment();
    if (!parsed.error.empty()) {
      std::fprintf(stderr, "simcuda: cuInit failed: %s\n", parsed.error.c_str());
      init_result = CUDA_ERROR_INVALID_VALUE;
      return;
    }
    auto* driver = new Driver(std::move(parsed.config));
    if (!driver->addresses_.valid() || !driver->physical_.valid()) {
      std::fprintf(stderr, "simcuda: cuInit failed: cannot reserve the simulated address space\n");
      init_result = CUDA_ERROR_OUT_OF_MEMORY;
      return;
    }
    the_driver.store(driver, std::memory_order_release);
    init_result = CUDA_SUCCESS;
    register_stats_writer();  // SIMCUDA_STATS, written at exit
  });
  return init_result;
}

Device* Driver::device(CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return nullptr;
  return devices_[static_cast<size_t>(ordinal)].get();
}

CUresult Driver::injected_fault(const char* export_name) {
  const std::string_view name(export_name);
  // Every rule that matches counts the call, even when an earlier rule fails it, so that rules
  // for one function (FUNC@2=...,FUNC@3=...) each count all its calls. The first to fire wins.
  CUresult injected = CUDA_SUCCESS;
  for (size_t i = 0; i < config_.faults.size(); ++i) {
    const FaultRule& rule = config_.faults[i];
    if (rule.function != name && rule.function != base_name(name)) continue;
    if (fault_calls_[i].fetch_add(1, std::memory_order_relaxed) + 1 == rule.nth_call &&
        injected == CUDA_SUCCESS)
      injected = rule.result;
  }
  return injected;
}

namespace {
// The calls a thread whose current context was destroyed may still make: those that read or
// change its context stack, and those that need no context.
bool moves_the_context_stack(std::string_view export_name) noexcept {
  for (const std::string_view allowed :
       {"cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxGetCurrent",
        "cuCtxDestroy", "cuDevicePrimaryCtx", "cuCtxCreate", "cuInit", "cuDriverGetVersion",
        "cuDeviceGet", "cuGetProcAddress", "cuGetErrorName", "cuGetErrorString"})
    if (export_name.starts_with(allowed)) return true;
  return false;
}
}  // namespace

CUresult enter_api(const char* export_name) noexcept {
  Driver* driver = Driver::instance();
  if (driver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!driver->config().faults.empty()) {
    if (CUresult injected = driver->injected_fault(export_name); injected != CUDA_SUCCESS)
      return injected;
  }
  if (Context* context = current_context()) {
    // Note [A context destroyed while current elsewhere] in context.cpp.
    if (context->destroyed.load(std::memory_order_acquire) && !moves_the_context_stack(export_name))
      return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (CUresult sticky = context->sticky_error.load(std::memory_order_relaxed);
        sticky != CUDA_SUCCESS)
      return sticky;
  }
  return CUDA_SUCCESS;
}

CUresult enter_api_anytime(const char* export_name) noexcept {
  Driver* driver = Driver::instance();
  if (driver == nullptr || driver->config().faults.empty()) return CUDA_SUCCESS;
  return driver->injected_fault(export_name);
}

}  // namespace simcuda
