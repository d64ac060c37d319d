#include "core/remap_check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/api.h"
#include "core/context.h"
#include "core/driver.h"
#include "core/vmm.h"

namespace simcuda {
namespace {

std::atomic<uint64_t> violations{0};

void report(const std::string& line) {
  violations.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "simcuda: remap violation: %s\n", line.c_str());
  if (Driver::instance()->config().abort_on_remap_violation) {
    std::fprintf(stderr, "simcuda: aborting (SIMCUDA_REMAP_VIOLATIONS=abort)\n");
    std::abort();
  }
}

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

void check_remap(const char* call, uint64_t address, uint64_t size) {
  std::string pending;
  for_each_context([&](Context& context) {
    for (const Stream* stream : context.all_streams()) {
      const std::optional<PendingOverlap> overlap = stream->pending_overlap(address, size);
      if (!overlap) continue;
      pending += pending.empty() ? "" : "; ";
      pending += std::string(overlap->what) + " (stream " + std::to_string(overlap->stream_id) +
                 ", work " + std::to_string(overlap->sequence) + ", " +
                 (overlap->running ? "running" : "queued") + ")";
    }
  });
  if (pending.empty()) return;
  report(std::string(call) + " of [" + hex(address) + ", " + hex(address + size) +
         ") while work that can touch it is pending: " + pending);
}

void check_touch_during_remap(const char* what, uint64_t address) {
  if (Driver::instance()->addresses().in_shadow(address)) address -= AddressSpace::kSpan;
  if (!vmm_remap_in_progress(address)) return;
  report(std::string(what) + " touched " + hex(address) +
         ", in a granule unmapped after it was mapped (a remap in progress)");
}

uint64_t remap_violations() { return violations.load(std::memory_order_relaxed); }

}  // namespace simcuda

// In-process access to the counter for tests: a simcuda-only export, found with
// dlsym(RTLD_DEFAULT, "simcuda_remap_violations") (absent on a real driver).
SIMCUDA_EXPORT uint64_t simcuda_remap_violations() { return simcuda::remap_violations(); }
