#include "hooks/shim_state.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>

#include "hooks/ending_signals.h"
#include "hooks/stats_publisher.h"
#include "hooks/tiered_allocation.h"
#include "telemetry/log.h"
#include "util/bytes.h"
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

void enter_forked_child() {
  in_forked_child = true;
  initialised_state.store(nullptr, std::memory_order_relaxed);
}

std::atomic<bool> exiting{false};

void write_exit_summary() {
  exiting.store(true, std::memory_order_relaxed);
  // A forked child logs nothing at all: the parent's memory is not its to report, and a log
  // lock held by another parent thread at fork time would never be released in the child.
  if (the_state == nullptr || in_forked_child) return;
  // An exit from inside a hook (a signal handler that calls exit() on a thread the signal found
  // in the shim) may hold any of the locks the last words take, and would wait for itself: they
  // are not written then.
  if (inside_shim) return;
  // The shim's threads stop first, so that what they still do (frees) is in the trace.
  the_state->host.stop_background_pinning();
  // Bounded: a free in progress waits for the device, which may never come free.
  const auto give_up_at = std::chrono::steady_clock::now() + kLastWordsDeadline;
  the_state->managed.stop_stream_ordered_frees(give_up_at);
  the_state->tiered_frees.stop(give_up_at);
  write_last_words(*the_state);
}

// [trace] file: opened before any hook records an event, or not at all (Note [A trace never
// stops the job] in telemetry/trace_file.h).
void start_trace(ShimState& shim) {
  const std::string& path = shim.config.trace.file;
  if (path.empty()) return;
  std::string problem;
  if (!shim.trace.open(path, shim.config.trace.format, problem)) {
    logging::warn("no trace: cannot open {} ({}); the job runs untraced", path, problem);
    return;
  }
  shim.ledger.set_events(&shim.trace);
  shim.tiered.set_events(&shim.trace);
  shim.prefetch.set_events(&shim.trace);
  logging::debug("tracing memory events to {}", shim.trace.path());
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
  start_trace(*the_state);
  initialised_state.store(the_state, std::memory_order_release);
  pthread_atfork(nullptr, nullptr, enter_forked_child);
  std::atexit(write_exit_summary);
  start_stats_publisher(*the_state);
  catch_ending_signals(*the_state);
  logging::debug("initialised (configuration: {})",
                 the_state->config.source_file.empty() ? "defaults and environment"
                                                       : the_state->config.source_file);
}

}  // namespace

namespace {

// Note [A percent host limit follows the container]
// [spill] host_limit = 50% is half of the memory the job could take if the host budget held
// nothing:
//     limit = fraction * (room + held)
// room: the smaller of MemAvailable and what the process's memory cgroups leave it (Note [Memory
// a cgroup leaves] in util/cgroup_memory.h), read now; held: the bytes the budget counts (the
// pool's pinned regions, managed spills, the program's own pinned memory). Both figures already
// count the held bytes as taken, so adding them back keeps the limit where it is however much the
// shim holds: it moves only when something else takes or gives back memory (the program's own
// allocations, page cache, other processes in the container or on the host). Without adding them
// back, a limit re-read as the job spills would shrink under its own spills (a 50% limit would
// settle at a third of the room). A reservation of b bytes then passes only if
// held + b <= fraction * (room + held), that is b <= fraction * room - (1 - fraction) * held:
// it fits in the room there is now and leaves the rest of it to the program. (This counts held
// memory as resident; pinned memory is, and a managed spill's pages count once they are touched.)
// The figures are read when the shim starts and again at most once a second as the job runs
// (refresh_host_limit(): on the spill path and by the stats thread), and the new limit is set on
// the budget, which never revokes what is held (Note [Host budget reservations] in
// core/host_budget.h): memory taken by others lowers the limit, and a later spill gets
// CUDA_ERROR_OUT_OF_MEMORY and a log line, not the kernel's OOM killer. The limit is per process:
// another process in the container is one of the "others".

constexpr std::chrono::nanoseconds kHostLimitRecheck = std::chrono::seconds(1);

// What a percent host limit is a percent of; null when [spill] host_limit is a size. Created by
// the first host_limit_bytes() (once, with the state) and never freed, like the state.
const AvailableMemory* available_memory = nullptr;
// steady_clock time, in nanoseconds, from which refresh_host_limit() reads the figures again.
std::atomic<int64_t> next_host_limit_check{0};

int64_t steady_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// fraction * (room + held), as Note [A percent host limit follows the container] says.
uint64_t percent_host_limit(const SpillConfig& spill, const MemoryRoom& room, uint64_t held) {
  const uint64_t total = room.bytes > UINT64_MAX - held ? UINT64_MAX : room.bytes + held;
  return spill.host_limit.resolve(total);
}

// [spill] host_limit in bytes when the shim starts.
uint64_t host_limit_bytes(const SpillConfig& spill) {
  if (!spill.host_limit.is_fraction()) return spill.host_limit.byte_count();
  available_memory = new (std::nothrow) AvailableMemory(kSystemRoot);
  next_host_limit_check.store(steady_now() + kHostLimitRecheck.count(), std::memory_order_relaxed);
  const std::optional<MemoryRoom> room =
      available_memory != nullptr ? available_memory->now() : std::nullopt;
  if (!room) {
    logging::warn("cannot read MemAvailable from /proc/meminfo, nor a memory cgroup's limit: "
                  "[spill] host_limit = {:.0f}% allows no spilling; give it as a size instead",
                  spill.host_limit.fraction_of_total() * 100);
    return 0;
  }
  const uint64_t limit = percent_host_limit(spill, *room, 0);
  try {
    logging::debug("host limit {} ([spill] host_limit = {:.0f}% of {}, {})", format_bytes(limit),
                   spill.host_limit.fraction_of_total() * 100, format_bytes(room->bytes),
                   room->cgroup_bound ? "what the memory cgroup leaves" : "MemAvailable");
  } catch (...) {  // the limit stands without its log line
  }
  return limit;
}

}  // namespace

void refresh_host_limit(ShimState& shim) noexcept {
  if (available_memory == nullptr) return;
  const int64_t now = steady_now();
  int64_t due = next_host_limit_check.load(std::memory_order_relaxed);
  // One thread reads the figures; the others go on with the limit as it is.
  if (now < due || !next_host_limit_check.compare_exchange_strong(
                       due, now + kHostLimitRecheck.count(), std::memory_order_relaxed))
    return;
  const std::optional<MemoryRoom> room = available_memory->now();
  if (!room) return;  // unreadable for now: the last limit stands
  shim.host_budget.set_limit(
      percent_host_limit(shim.config.spill, *room, shim.host_budget.used()));
}

ShimState::ShimState(const Config& loaded) noexcept
    : config(loaded),
      host_budget(host_limit_bytes(config.spill)),
      managed(config.spill, host_budget, captures),
      host(config.spill, host_budget, captures),
      spill_facts(*this),
      spill(config.spill, ledger, host_budget, spill_facts, managed, host),
      vmm_spill(config.spill, ledger, vmm, host_budget, spill_facts, host_vmm),
      tiered_budgets(ledger, host_budget, &pool_books()),
      // tiered_reuse is made later, and asked only once blocks move.
      arenas(config.tiered, host_vmm, captures, tiered_reuse),
      tiered(tiered_budgets, arenas, window,
             {.policy = config.tiered.policy, .window = config.tiered.window}, &use),
      prefetch_devices(captures),
      prefetch(tiered_budgets, prefetch_devices,
               {.policy = config.tiered.policy, .admission = config.tiered.admission}),
      tiered_rules(config.tiered.rules),
      tiered_blocks(config, ledger, use, host_budget, tiered, prefetch, tiered_rules, call_sites),
      submission_events(captures),
      submissions(tiered, window, use, captures, config.tiered, submission_events,
                  config.tiered.mover == TieredMover::kPrefetch ? &prefetch : nullptr) {
  // Note [Dead blocks and the prefetch mover] in placement/stream_ordered_blocks.h
  prefetch.set_dead_blocks(&stream_ordered_blocks);
}

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

void write_last_words(ShimState& shim) noexcept {
  enum Progress : int { kNotStarted, kWriting, kWritten };
  static constinit std::atomic<int> progress{kNotStarted};
  int expected = kNotStarted;
  if (!progress.compare_exchange_strong(expected, kWriting)) {
    const auto deadline = std::chrono::steady_clock::now() + kLastWordsDeadline;
    while (progress.load() != kWritten && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  stop_stats_publisher(shim);
  if (shim.config.spill.mode == SpillMode::kTiered) {  // launches are counted in it alone
    const core::LaunchCounts launches = shim.use.launch_counts();
    shim.trace.launches_counted(launches.launches, launches.unreadable);
  }
  shim.trace.finish();
  if (shim.config.log.summary) {
    logging::summary(shim.ledger.summary_line());
    if (const std::string tiered = tiered_summary(shim); !tiered.empty()) logging::summary(tiered);
    if (const std::string rules = tiered_rules_summary(shim); !rules.empty())
      logging::summary(rules);
  }
  logging::report_suppressed();
  logging::flush();
  progress.store(kWritten);
}

bool exit_begun() noexcept { return exiting.load(std::memory_order_relaxed); }

const std::string* configuration_error() noexcept {
  const Entry entry;  // initialises
  return the_config_error;
}

}  // namespace vramspill::hooks
