// The native call stack of the calling thread, frame by frame as the library each return
// address lies in and the nearest exported symbol before it, for the call-site patterns of
// [[tiered.rule]] (README.md, "Rules for tiered blocks").
//
// Note [Call sites through libunwind]
// The stack is walked by libunwind's unw_backtrace (it reads .eh_frame, so it needs no frame
// pointers), and each address is named with dladdr. libunwind.so.8 also exports the C++
// exception unwinder (_Unwind_RaiseException & co.): linked into the preloaded library it would
// replace libgcc_s's in every process, so it is dlopen'ed RTLD_LOCAL, and only on the first
// capture, which happens only when a rule names a library or a symbol; a job without such rules
// never loads it. Without libunwind (not installed, or a failed dlopen) there is no stack, and
// the caller says once that rules with patterns cannot match. dladdr knows only the dynamic
// symbol table: a function of a library that exports it is named, a static function or one of
// an executable linked without -rdynamic gets the nearest exported symbol before it, or none.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string_view>

namespace vramspill {

struct CallFrame {
  // Views of the loaded libraries' own strings: valid while the libraries stay loaded, which
  // the caller relies on only until it returns.
  std::string_view library;  // the file name without its directory ("libnccl.so.2"); or empty
  std::string_view symbol;   // the nearest exported symbol at or before the address; or empty
};

struct CallStack {
  static constexpr std::size_t kDepth = 16;  // frames kept, innermost first
  std::array<CallFrame, kDepth> frames{};
  std::size_t count = 0;

  std::span<const CallFrame> view() const { return {frames.data(), count}; }
};

// Fills `stack` with the caller's frames, leaving out those in the object (the executable or
// shared library) that contains `skip_object` (pass an address in the shim to keep its own
// frames out; null keeps every frame). False, with `stack` empty and `why` saying why, when
// libunwind cannot be loaded. Thread-safe; allocates nothing after the first call.
bool capture_call_stack(const void* skip_object, CallStack& stack, std::string_view& why) noexcept;

}  // namespace vramspill
