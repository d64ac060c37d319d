// The shim's log: one spdlog logger named "vramspill", lines "[vramspill] warning: ...", to
// standard error or appended to [log] file, through descriptors of the shim's own (Note [The
// shim's own descriptors] in owned_descriptor.h: a program that closed its standard error never gets log
// lines in the file it opens next). Nothing is set up when the library is loaded: the first
// message (or configure()) creates the logger. Until configure() is called, messages go to
// standard error at the options table's default level, so an error in the configuration itself
// can still be reported.
//
// spdlog and fmt are compiled in header-only with hidden visibility (Note [Preload-safe
// dependency targets]); only fmt's format-string checking is visible here, so callers format
// with compile-time-checked format strings:
//
//   logging::warn("cannot spill {} bytes: {}", size, reason);
//   logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "refused {} over the budget", size);
//
// Every function here is noexcept: a message that cannot be formatted or written is dropped,
// because logging must never break the call it describes.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "config/config.h"
#include "telemetry/rate_limit.h"

namespace vramspill::logging {

// Replaces the logger with one for `config` (level, file). Call once, after load_config(). A
// file that cannot be opened, or that is not a regular file (a named pipe, a device, a
// directory: Note [Only regular files] in config/config.h), falls back to standard error, with
// a warning saying why.
void configure(const LogConfig& config) noexcept;

// Whether a message at `level` would be written: one relaxed atomic load, so callers can skip
// building expensive arguments.
bool enabled(LogLevel level) noexcept;

// Writes a finished message (no formatting).
void write(LogLevel level, std::string_view message) noexcept;

// The one line at exit ([log] summary): written at any level except off, flushed.
void summary(std::string_view line) noexcept;

// At exit: one line per rate-limited key whose suppressed messages were not reported yet.
void report_suppressed() noexcept;

void flush() noexcept;

// Writes `message` with the notes `decision` asks for ("(suppressed 7 similar messages)").
void write_limited(LogLevel level, const RateDecision& decision, std::string message) noexcept;
// The level `key`'s messages are logged at, for the report of those suppressed.
void note_rate_key_level(RateKey key, LogLevel level) noexcept;

// fmt::vformat, compiled once, in log.cpp. fmt is header-only here, so calling fmt::format from
// the templates below would compile fmt's whole formatting engine into every file that logs,
// which made those files the slowest of the build (4x, under the sanitizers). The format strings
// are still checked at compile time: fmt::format_string<Args...> checks them where it is made.
std::string format_message(fmt::string_view format, fmt::format_args args);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!enabled(level)) return;
  try {
    write(level, format_message(format, fmt::make_format_args(args...)));
  } catch (...) {  // out of memory while formatting: drop the message, keep the program
  }
}

template <typename... Args>
void trace(fmt::format_string<Args...> format, Args&&... args) noexcept {
  log(LogLevel::kTrace, format, std::forward<Args>(args)...);
}
template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) noexcept {
  log(LogLevel::kDebug, format, std::forward<Args>(args)...);
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) noexcept {
  log(LogLevel::kInfo, format, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) noexcept {
  log(LogLevel::kWarn, format, std::forward<Args>(args)...);
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) noexcept {
  log(LogLevel::kError, format, std::forward<Args>(args)...);
}

// A message that can repeat: at most kRateBurst per kRateWindow for `key` (telemetry/rate_limit.h).
template <typename... Args>
void limited(LogLevel level, RateKey key, fmt::format_string<Args...> format,
             Args&&... args) noexcept {
  if (!enabled(level)) return;
  note_rate_key_level(key, level);
  const RateDecision decision = should_log(key);
  if (!decision) return;
  try {
    write_limited(level, decision, format_message(format, fmt::make_format_args(args...)));
  } catch (...) {  // as in log()
  }
}

}  // namespace vramspill::logging
