#include "core/kernel_fault.h"

#include <atomic>
#include <cerrno>
#include <csetjmp>  // sigjmp_buf, sigsetjmp, siglongjmp (POSIX)
#include <csignal>
#include <mutex>

namespace simcuda {
namespace {

struct Guard {
  sigjmp_buf jump;
  void* volatile fault_address = nullptr;  // written by the handler, read after siglongjmp
};

// The kernel running on this thread, if any. initial-exec: the handler must not make the first
// access to a dynamically allocated TLS block (glibc may malloc there), and libcuda.so.1 is
// loaded at start-up or dlopen()ed early enough to get static TLS for one pointer.
__attribute__((tls_model("initial-exec"))) thread_local Guard* active_guard = nullptr;

struct sigaction previous_segv;
struct sigaction previous_bus;
std::atomic<HostFaultHandler> host_fault_handler{nullptr};
std::once_flag install_once;

// Signals the kernel raised for a bad access, as opposed to kill()/raise() (si_code <= 0).
bool is_memory_fault(const siginfo_t* info) { return info != nullptr && info->si_code > 0; }

// Step 3 of Note [Kernel faults].
void chain(int signal, siginfo_t* info, void* ucontext) {
  const struct sigaction& previous = signal == SIGBUS ? previous_bus : previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(signal, info, ucontext);
    return;
  }
  if ((previous.sa_flags & SA_SIGINFO) == 0 && previous.sa_handler != SIG_DFL &&
      previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
    return;
  }
  // Default action (an ignored fault signal gets it too: the kernel forces it for real faults).
  // A real fault re-executes the instruction on return and now kills the process; a signal sent
  // by kill() is sent again, and is delivered when the handler returns.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal, &default_action, nullptr);
  if (!is_memory_fault(info)) raise(signal);
}

void on_fault(int signal, siginfo_t* info, void* ucontext) {
  if (is_memory_fault(info)) {
    if (Guard* guard = active_guard; guard != nullptr) {
      active_guard = nullptr;  // a later fault on this thread is no longer the kernel's
      guard->fault_address = info->si_addr;
      siglongjmp(guard->jump, 1);  // also restores the signal mask saved by sigsetjmp
    }
    const int saved_errno = errno;
    const HostFaultHandler handler = host_fault_handler.load(std::memory_order_acquire);
    const bool retry = handler != nullptr && handler(info->si_addr);
    errno = saved_errno;
    if (retry) return;
  }
  chain(signal, info, ucontext);
}

}  // namespace

void install_fault_handler() {
  std::call_once(install_once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    // SA_ONSTACK: when the program (or ASan) set up an alternate stack, stack overflows reach
    // the handler we chain to as they would without simcuda.
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_segv);
    sigaction(SIGBUS, &action, &previous_bus);
  });
}

bool run_guarded(void (*body)(void* data), void* data, void** fault_address) {
  install_fault_handler();
  Guard guard;
  if (sigsetjmp(guard.jump, /*savemask=*/1) != 0) {
    *fault_address = guard.fault_address;
    return false;
  }
  active_guard = &guard;
  // The handler reads active_guard on this thread: the stores must not move across the body.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  body(data);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  active_guard = nullptr;
  return true;
}

void set_host_fault_handler(HostFaultHandler handler) {
  install_fault_handler();
  host_fault_handler.store(handler, std::memory_order_release);
}

}  // namespace simcuda
