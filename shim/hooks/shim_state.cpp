#include "hooks/shim_state.h"

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "hooks/stats_publisher.h"
#include "telemetry/log.h"
#include "util/host_memory.h"

namespace vramspill::hooks {
namespace {

std::once_flag init_once;
std::atomic<bool> initialised{false};  // lets every later hook skip call_once's locking
ShimState* the_state = nullptr;       // set once by initialise(); never freed
std::string* the_config_error = nullptr;
bool in_forked_child = false;         // written by the atfork handler, read by each hook

// initial-exec: the preloaded library is in the initial TLS block, so this is a plain
// %fs-relative access instead of a __tls_get_addr call on every hook.
__attribute__((tls_model("initial-exec"))) thread_local bool inside_shim = false;

void enter_forked_child() { in_forked_child = true; }

void write_exit_summary() {
  // A forked child logs nothing at all: the parent's memory is not its to report, and a log
  // lock held by another parent thread at fork time would never be released in the child.
  if (the_state == nullptr || in_forked_child) return;
  stop_stats_publisher(*the_state);
  the_state->host.stop_background_pinning();
  if (the_state->config.log.summary) logging::summary(the_state->ledger.summary_line());
  logging::report_suppressed();
  logging::flush();
}

void initialise() {
  ConfigResult loaded = load_config();
  if (!loaded) {
    the_config_error = new std::string(loaded.error().message);
    logging::error("invalid configuration, CUDA initialisation will fail:");
    for (const std::string& problem : loaded.error().problems) logging::error("  {}", problem);
    return;
  }
  logging::configure(loaded.config().log);
  the_state = new ShimState(loaded.config());
  pthread_atfork(nullptr, nullptr, enter_forked_child);
  std::atexit(write_exit_summary);
  start_stats_publisher(*the_state);
  logging::debug("initialised (configuration: {})",
                 the_state->config.source_file.empty() ? "defaults and environment"
                                                       : the_state->config.source_file);
}

}  // namespace

namespace {

// [spill] host_limit in bytes. A percent of MemAvailable is taken once, at start: the limit must
// not shrink as the job's own spills use the memory up.
uint64_t host_limit_bytes(const SpillConfig& spill) {
  if (!spill.host_limit.is_fraction()) return spill.host_limit.byte_count();
  const std::optional<uint64_t> available = host_memory_available();
  if (!available) {
    logging::warn("cannot read MemAvailable from /proc/meminfo: [spill] host_limit = {:.0f}% "
                  "allows no spilling; give it as a size instead",
                  spill.host_limit.fraction_of_total() * 100);
  }
  return spill.host_limit.resolve(available.value_or(0));
}

}  // namespace

ShimState::ShimState(const Config& loaded) noexcept
    : config(loaded),
      host_budget(host_limit_bytes(config.spill)),
      managed(config.spill, host_budget),
      host(config.spill, host_budget) {}

Entry::Entry() noexcept {
  if (inside_shim) return;
  if (!initialised.load(std::memory_order_acquire)) {
    try {
      std::call_once(init_once, initialise);
    } catch (...) {  // out of memory while initialising: stay out of the way
      return;
    }
    initialised.store(true, std::memory_order_release);
  }
  if (in_forked_child || the_state == nullptr) return;
  inside_shim = true;
  outermost_ = true;
  state_ = the_state;
}

Entry::~Entry() {
  if (outermost_) inside_shim = false;
}

const std::string* configuration_error() noexcept {
  const Entry entry;  // initialises
  return the_config_error;
}

}  // namespace vramspill::hooks
