#include "core/context.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

#include "core/capture.h"
#include "core/event.h"
#include "core/host_clock.h"
#include "core/memory_release.h"
#include "core/peer_access.h"

namespace simcuda {
namespace {

std::mutex live_contexts_mutex;
std::unordered_set<Context*>& live_contexts() {
  static auto* contexts = new std::unordered_set<Context*>();  // outlives exit-time callers
  return *contexts;
}

// The calling thread's context stack. Trivially destructible: a call made while the process
// exits (a static destructor's, after the main thread's thread-locals are destroyed) finds it as it
// was, as a real driver serves such calls; a vector there crashed. Its depth is bounded
// (kContextStackDepth, assumed: the driver documents no limit).
struct ContextStack {
  std::array<Context*, kContextStackDepth> contexts{};
  std::size_t depth = 0;
};
thread_local ContextStack context_stack;

// Each thread's serial, which keys its per-thread default streams in each context. Never reused,
// unlike a thread id, so a new thread never inherits an exited one's stream; and trivially
// destructible, so a `_ptsz` call from a static destructor at exit finds it, as the stack above.
std::atomic<uint64_t> next_thread_serial{1};
thread_local uint64_t thread_serial = 0;

uint64_t calling_thread_serial() {
  if (thread_serial == 0) thread_serial = next_thread_serial.fetch_add(1, std::memory_order_relaxed);
  return thread_serial;
}

}  // namespace

Context::Context(Device* device_, unsigned int flags_, bool primary_)
    : device(device_),
      flags(flags_),
      primary(primary_),
      legacy_(std::make_unique<Stream>(this, Stream::Kind::kLegacyDefault, 0u, 0)) {}

Context::~Context() {
  ending.store(true, std::memory_order_release);
  synchronize();
  // Streams are destroyed (joined) before the context they point to.
  streams_.clear();
  legacy_.reset();
}

void Context::bury() {
  std::lock_guard lock(streams_mutex_);
  streams_.clear();
  live_streams_.clear();
  per_thread_streams_.clear();
  destroyed.store(true, std::memory_order_release);
}

Stream& Context::per_thread_stream() {
  const uint64_t serial = calling_thread_serial();
  std::lock_guard lock(streams_mutex_);
  auto [it, inserted] = per_thread_streams_.try_emplace(serial, nullptr);
  if (inserted) {
    streams_.push_back(std::make_unique<Stream>(this, Stream::Kind::kPerThreadDefault, 0u, 0));
    it->second = streams_.back().get();
  }
  return *it->second;
}

Stream* Context::create_stream(unsigned int stream_flags, int priority) {
  std::lock_guard lock(streams_mutex_);
  streams_.push_back(std::make_unique<Stream>(this, Stream::Kind::kCreated, stream_flags, priority));
  live_streams_.push_back(streams_.back().get());
  return streams_.back().get();
}

void Context::retire_stream(Stream* stream) {
  std::lock_guard lock(streams_mutex_);
  std::erase(live_streams_, stream);
  stream->retire();
}

void Context::retire_created_streams() {
  std::lock_guard lock(streams_mutex_);
  for (Stream* stream : live_streams_) stream->retire();
  live_streams_.clear();
}

bool Context::owns_stream(const Stream* stream) {
  std::lock_guard lock(streams_mutex_);
  return std::find(live_streams_.begin(), live_streams_.end(), stream) != live_streams_.end();
}

std::vector<StreamPoint> Context::blocking_stream_tails() {
  std::lock_guard lock(streams_mutex_);
  std::vector<StreamPoint> tails;
  for (const auto& stream : streams_)
    if (stream->blocking()) tails.push_back(stream->tail());
  return tails;
}

void Context::synchronize() {
  host_wait(legacy_->tail());
  std::vector<Stream*> streams;
  {
    std::lock_guard lock(streams_mutex_);
    for (const auto& stream : streams_) streams.push_back(stream.get());
  }
  for (Stream* stream : streams) host_wait(stream->tail());
}

std::vector<const Stream*> Context::all_streams() {
  std::lock_guard lock(streams_mutex_);
  std::vector<const Stream*> all{legacy_.get()};
  for (const auto& stream : streams_) all.push_back(stream.get());
  return all;
}

Context* current_context() {
  return context_stack.depth == 0 ? nullptr : context_stack.contexts[context_stack.depth - 1];
}

void set_current_context(Context* context) {
  if (context_stack.depth == 0) {
    if (context != nullptr) context_stack.contexts[context_stack.depth++] = context;
  } else if (context == nullptr) {
    --context_stack.depth;
  } else {
    context_stack.contexts[context_stack.depth - 1] = context;
  }
}

bool push_context(Context* context) {
  if (context_stack.depth == kContextStackDepth) return false;
  context_stack.contexts[context_stack.depth++] = context;
  return true;
}

Context* pop_context() {
  if (context_stack.depth == 0) return nullptr;
  return context_stack.contexts[--context_stack.depth];
}

Context* context_from_handle(CUcontext handle) {
  auto* context = reinterpret_cast<Context*>(handle);
  std::lock_guard lock(live_contexts_mutex);
  return live_contexts().contains(context) ? context : nullptr;
}

Context* create_context(Device* device, unsigned int flags) {
  auto* context = new Context(device, flags, /*primary_=*/false);
  std::lock_guard lock(live_contexts_mutex);
  live_contexts().insert(context);
  return context;
}

void register_primary_context(Context* context) {
  std::lock_guard lock(live_contexts_mutex);
  live_contexts().insert(context);
}

// What a context takes with it when it ends, destroyed or reset: captures, graphs and events,
// then its memory once the work still queued that may use it has run, then peer access from it
// and to it (Note [Peer access] in peer_access.h); its own kernels, which the synchronisation ran,
// kept theirs to the end.
namespace {
void end_context_state(Context* context) {
  forget_context_captures(context);
  forget_context_events(context);
  context->ending.store(true, std::memory_order_release);
  context->synchronize();
  release_context_memory(*context);
  forget_peer_access(*context);
}
}  // namespace

// Note [A context destroyed while current elsewhere]
// cuda.h, cuCtxDestroy: "If ctx is current to other threads, then ctx will remain current to
// those threads, and attempting to access ctx from those threads will result in the error
// CUDA_ERROR_CONTEXT_IS_DESTROYED." So the destroyed context's object is never freed: its state
// ends, its streams are joined, and it is marked destroyed (a few hundred bytes kept per context
// destroyed), so that another thread's stack may still point at it. A call from such a thread
// gets that error (enter_api in driver.cpp), except the calls that change or read the thread's
// stack, with which it moves on.
void destroy_context(Context* context) {
  {
    std::lock_guard lock(live_contexts_mutex);
    live_contexts().erase(context);
  }
  const auto kept = std::remove(context_stack.contexts.begin(),
                                context_stack.contexts.begin() + context_stack.depth, context);
  context_stack.depth = static_cast<std::size_t>(kept - context_stack.contexts.begin());
  end_context_state(context);
  context->bury();
}

// Note [Resetting a primary context]
// cuDevicePrimaryCtxReset "destroys all allocations and resets all state on the primary
// context" (cuda.h), whoever else still uses it: its streams, events, graphs and memory go as
// when a created context is destroyed, and their handles are refused from then on. The context
// itself stays, with its retain count and flags (the driver documents that a reset does not
// release it, and that other modules may still release their reference), so its handle stays
// usable and the next use finds an empty context. Its modules stay loaded (simcuda's functions
// serve every context), and a sticky error stays (the documentation says to restart the
// process): neither is measured.
void reset_primary_context(Context* primary) {
  end_context_state(primary);
  primary->retire_created_streams();
  primary->ending.store(false, std::memory_order_release);
}

void for_each_context(const std::function<void(Context&)>& visit) {
  std::lock_guard lock(live_contexts_mutex);
  for (Context* context : live_contexts()) visit(*context);
}

}  // namespace simcuda
