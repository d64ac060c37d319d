// Memory faults: a kernel that touches unmapped memory poisons its context instead of killing
// the process; a host thread that touches a device pointer still crashes, as on a GPU.
//
// Note [Kernel faults]
// simcuda runs kernels on stream worker threads, on real memory (Note [Two views of device
// memory] in address_space.h). A kernel touching a freed pointer, an unmapped part of a VMM
// reservation or a garbage address gets a real SIGSEGV (or SIGBUS, e.g. beyond the end of a
// file mapping). simcuda's handler, installed once (at the first launch, or when a host fault
// handler is set), decides:
//  1. The faulting thread is inside run_guarded() (a kernel, or the bytes of a copy or memset,
//     are being moved on it; Note [Copy faults] in copy_engine.h): leave by siglongjmp; the
//     work then sets the context's sticky error (CUDA_ERROR_ILLEGAL_ADDRESS).
//  2. Otherwise the host fault handler (set by managed memory) may claim the address, make it
//     accessible and return true: the faulting instruction is retried.
//  3. Otherwise the fault goes to the handler that was installed before simcuda's (SA_SIGINFO or
//     plain), or, when that was the default action, the default is restored and the fault
//     re-raised: the process dies as it would have without simcuda.
//
// Limits: the handler uses only async-signal-safe calls itself, but the host fault handler of
// step 2 runs ordinary code; that is acceptable because the fault is synchronous, provided that
// code takes no lock the faulting thread could hold. A handler installed by the program after
// simcuda's replaces it (kernels then crash the process unless that handler chains to ours).
// Under AddressSanitizer, simcuda's handler is installed over ASan's (allow_user_segv_handler,
// on by default) and chains to it for host faults, so ASan still reports them.
#pragma once

namespace simcuda {

// Installs the SIGSEGV/SIGBUS handler; calls after the first do nothing. Thread-safe.
void install_fault_handler();

// Runs body(data) on the calling thread, guarded: returns true when it returned normally, false
// when it faulted (then *fault_address is the address it touched). `body` is left by siglongjmp
// on a fault, so nothing it runs may hold a lock or own an object with a destructor.
bool run_guarded(void (*body)(void* data), void* data, void** fault_address);

// Called for memory faults outside kernels, before chaining (step 2 of Note [Kernel faults]).
// Returns true when it made `address` accessible and the access should be retried.
using HostFaultHandler = bool (*)(void* address);
void set_host_fault_handler(HostFaultHandler handler);  // also installs the signal handler

}  // namespace simcuda
