// Contexts and the per-thread current-context stack.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/stream.h"

namespace simcuda {

class Device;

struct Context {
  Context(Device* device_, unsigned int flags_, bool primary_);
  ~Context();

  Device* device;
  unsigned int flags;
  bool primary;
  int primary_retains = 0;  // primary contexts only; guarded by the context table's lock
  // A fault in a kernel (CUDA_ERROR_ILLEGAL_ADDRESS) poisons the context, as on a GPU.
  std::atomic<CUresult> sticky_error{CUDA_SUCCESS};
  // Set while the context is destroyed or reset: a stream waiting for a value no one will write
  // gives up then (Note [Waiting for a value] in copy_engine.h), so neither hangs.
  std::atomic<bool> ending{false};
  // Set once cuCtxDestroy has ended it (Note [A context destroyed while current elsewhere]).
  std::atomic<bool> destroyed{false};

  // Streams. The legacy default stream exists from the start; created streams are kept (also
  // after cuStreamDestroy, see Stream::retire) until the context is destroyed.
  Stream& legacy_stream() { return *legacy_; }
  Stream& per_thread_stream();  // the calling thread's per-thread default stream
  Stream* create_stream(unsigned int flags, int priority);
  void retire_stream(Stream* stream);
  void retire_created_streams();  // a reset: every stream the program created is destroyed
  bool owns_stream(const Stream* stream);
  // Points that mark all work queued so far on every stream that is blocking w.r.t. the legacy
  // stream (the legacy stream's implicit synchronisation).
  std::vector<StreamPoint> blocking_stream_tails();
  // Waits for every stream of the context, as the host (Note [Host clock] in host_clock.h).
  void synchronize();
  // Every stream the context has (destroyed ones included: they stay owned), for the statistics.
  std::vector<const Stream*> all_streams();

  CUcontext handle() { return reinterpret_cast<CUcontext>(this); }
  // cuCtxDestroy, once its state has ended: joins its streams and marks it destroyed; the object
  // stays (Note [A context destroyed while current elsewhere]).
  void bury();

 private:
  std::mutex streams_mutex_;
  std::unique_ptr<Stream> legacy_;
  std::vector<std::unique_ptr<Stream>> streams_;     // created and per-thread streams
  std::vector<Stream*> live_streams_;                 // not yet destroyed by the program
  // The per-thread default streams, by the serial of the thread each belongs to.
  std::unordered_map<uint64_t, Stream*> per_thread_streams_;
};

// The calling thread's current context, or nullptr.
Context* current_context();
void set_current_context(Context* context);  // replaces the top of the stack
// How many contexts a thread's stack holds at most: kept small, since the stack lives in the
// library's thread-local block, which must fit the static TLS room left to dlopen()ed libraries
// (kernel_fault.cpp's initial-exec guard puts the whole block there).
inline constexpr std::size_t kContextStackDepth = 32;
// False, pushing nothing, when the stack is full.
bool push_context(Context* context);
Context* pop_context();

// Handles from the program are checked against the live contexts before use.
Context* context_from_handle(CUcontext handle);
Context* create_context(Device* device, unsigned int flags);
void register_primary_context(Context* context);
void destroy_context(Context* context);
// cuDevicePrimaryCtxReset (Note [Resetting a primary context] in context.cpp).
void reset_primary_context(Context* primary);
// Calls `visit` on each live context; none is destroyed meanwhile (the statistics at exit).
void for_each_context(const std::function<void(Context&)>& visit);

}  // namespace simcuda
