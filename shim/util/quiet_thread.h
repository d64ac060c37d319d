// Threads of the shim's own (pinning ahead, stats, stream-ordered frees): named, and with every
// signal blocked, so that the program's signal handlers keep running on the program's threads.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace vramspill {

// Starts `body` on a new thread named `name` (at most 15 characters); throws what std::thread
// throws when no thread can be created.
template <typename Body>
std::thread start_quiet_thread(const char* name, Body body) {
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);  // the new thread inherits the mask
  try {
    std::thread thread([name, body = std::move(body)]() mutable {
      pthread_setname_np(pthread_self(), name);
      body();
    });
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return thread;
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw;
  }
}

}  // namespace vramspill
