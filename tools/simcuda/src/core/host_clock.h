// The modeled clock of the host threads: what a synchronising call costs the program.
//
// Note [Host clock]
// Each stream has a modeled clock (core/stream.h); the host has one too, kept per host thread.
// - A call that blocks until work is done advances the calling thread's clock to the modeled
//   time that work ends: cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize, synchronous
//   copies and the memsets that wait (api/copy.cpp, api/memset.cpp), an asynchronous copy into
//   pageable memory, and the implicit synchronisations of cuMemFree, cuMemFreeHost,
//   cuMemHostUnregister, cuCtxDestroy and cuDevicePrimaryCtxReset (Context::synchronize).
// - A cuStreamQuery or cuEventQuery answers as a GPU would at the thread's clock. simcuda's own
//   execution runs ahead of the model, so work it has done may still be running in modeled
//   time: then the query answers CUDA_ERROR_NOT_READY and costs nothing, as a GPU's query does
//   not wait. But a program that polls until the work is done has waited for it as surely as
//   one that synchronised: a query of work the thread already queried while its clock has not
//   moved since (whatever calls that cost no modeled time came between: a polling loop) moves
//   the clock to the work's modeled end and answers CUDA_SUCCESS. Work that ended by the
//   thread's clock is done at once.
// - A driver call also costs host time of its own: its thread's clock advances by the call's
//   measured cost as it returns (Note [Host call costs] in core/host_call_cost.h: VMM map,
//   set-access and unmap, launches, cuMemAlloc and cuMemFree).
// - Work a thread queues starts no earlier than that thread's clock (Stream::enqueue's
//   `not_before`). Without it, work queued on a fresh stream after a long synchronisation
//   started at modeled time 0, as if the wait had cost nothing.
// Why per thread, not one clock for the process: simcuda sees only driver calls. With one
// clock, a thread that waits for device 0 would push back the work that an unrelated thread
// queues on device 1 (one host thread per GPU is common). Per thread, a handoff between host
// threads (a mutex, a queue) is not seen: work the second thread queues may start earlier than
// it could on a GPU. The statistics report the latest clock any thread reached
// (host_modeled_seconds). The stream clock read after a wait may include work queued later, so
// like the rest of the model this errs towards late starts.
#pragma once

#include "core/stream.h"

namespace simcuda {

// The calling thread's modeled host clock, in seconds.
double host_clock();
// The calling thread observed work that ends at modeled time `seconds` (a wait or a query).
void host_clock_observe(double seconds);
// A query of `work` (an id of what is queried: a stream's tail, an event's record) that
// simcuda's execution has done, ending at modeled time `modeled_end`: whether it answers done
// (Note [Host clock]).
bool host_clock_query_sees(uint64_t work, double modeled_end) noexcept;
// The calling thread spent `seconds` in a driver call (Note [Host call costs] in
// core/host_call_cost.h).
void host_clock_advance(double seconds);
// The calling thread blocks until `point` is reached, then observes its stream's clock.
void host_wait(const StreamPoint& point);
// The latest modeled host clock any thread reached (the statistics' host_modeled_seconds).
double host_modeled_seconds();

}  // namespace simcuda
