#include "hooks/shim_state.h"

#include <pthread.h>

#include <cstdlib>
#include <mutex>

#include "telemetry/log.h"

namespace vramspill::hooks {
namespace {

std::once_flag init_once;
ShimState* the_state = nullptr;       // set once by initialise(); never freed
std::string* the_config_error = nullptr;
bool in_forked_child = false;         // written by the atfork handler, read by each hook

thread_local bool inside_shim = false;

void enter_forked_child() { in_forked_child = true; }

void write_exit_summary() {
  if (the_state == nullptr) return;
  if (the_state->config.log.summary && !in_forked_child)
    logging::summary(the_state->ledger.summary_line());
  logging::report_suppressed();
  logging::flush();
}

void initialise() {
  ConfigResult loaded = load_config();
  if (!loaded) {
    the_config_error = new std::string(loaded.error().message);
    logging::error("invalid configuration, CUDA initialisation will fail: {}", *the_config_error);
    return;
  }
  logging::configure(loaded.config().log);
  the_state = new ShimState{loaded.config(), {}};
  pthread_atfork(nullptr, nullptr, enter_forked_child);
  std::atexit(write_exit_summary);
  logging::debug("initialised (configuration: {})",
                 the_state->config.source_file.empty() ? "defaults and environment"
                                                       : the_state->config.source_file);
}

}  // namespace

Entry::Entry() noexcept {
  if (inside_shim) return;
  try {
    std::call_once(init_once, initialise);
  } catch (...) {  // out of memory while initialising: stay out of the way
    return;
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
