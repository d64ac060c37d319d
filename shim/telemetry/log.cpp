#include "telemetry/log.h"

#include <fcntl.h>
#include <spdlog/details/log_msg.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

#include "telemetry/owned_descriptor.h"

namespace vramspill::logging {
namespace {

constexpr std::string_view kLoggerName = "vramspill";
constexpr std::string_view kPattern = "[vramspill] %l: %v";

// Note [Immortal logger]
// The logger is created on first use and never destroyed. Hooks run on other threads while the
// program exits, and atexit handlers (the summary line) run after static destructors have
// started: a logger destroyed then would be used after it is freed. Each logger configure()
// replaces is kept on a list rather than freed, for the same reason: a thread may still be
// writing through it. The list hangs off a global, so leak checkers see it as reachable.
// Every message is flushed as it is written: the message that explains an abort or an OOM kill
// is the one that must not be left in a buffer.
struct Published {
  std::shared_ptr<spdlog::logger> logger;
  Published* previous = nullptr;
};

constinit std::atomic<Published*> g_current{nullptr};

// The level as an int, checked before any formatting; kUnset until a logger exists.
constexpr int kUnset = -1;
constinit std::atomic<int> g_level{kUnset};

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::off;
}

// Writes whole formatted lines to a descriptor it owns (Note [The shim's own descriptors] in
// telemetry/owned_descriptor.h); with none, drops them. Each line is one write() straight to the
// file: nothing is left in a buffer (Note [Immortal logger]). A line the file does not take (a
// full non-blocking pipe, a closed reader, a full disk) is dropped, a closed reader raising no
// SIGPIPE (Note [No SIGPIPE from the shim's writes] in telemetry/owned_descriptor.h).
class DescriptorSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit DescriptorSink(int fd) : file_(fd) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    if (!file_.open()) return;
    spdlog::memory_buf_t formatted;
    formatter_->format(message, formatted);
    file_.write_all(formatted.data(), formatted.size());
  }
  void flush_() override {}

 private:
  telemetry::OwnedDescriptor file_;
};

// Builds a logger for `config`; `fallback_reason` is set when the file could not be opened.
std::shared_ptr<spdlog::logger> make_logger(const LogConfig& config, std::string& fallback_reason) {
  int fd = config.file.empty()
               ? -1
               : telemetry::open_owned_file(config.file, O_WRONLY | O_APPEND, fallback_reason);
  if (fd < 0) fd = telemetry::standard_error_copy();  // -1: none the program started with
  spdlog::sink_ptr sink = std::make_shared<DescriptorSink>(fd);
  auto logger = std::make_shared<spdlog::logger>(std::string(kLoggerName), std::move(sink));
  logger->set_pattern(std::string(kPattern));
  logger->set_level(to_spdlog(config.level));
  logger->flush_on(spdlog::level::trace);  // Note [Immortal logger]
  return logger;
}

// Makes `logger` current; the one it replaces stays alive (Note [Immortal logger]).
void publish(std::shared_ptr<spdlog::logger> logger, LogLevel level) {
  auto* published = new Published{std::move(logger), nullptr};
  // Readers only ever look at the head; the link just keeps the old logger reachable.
  published->previous = g_current.exchange(published, std::memory_order_acq_rel);
  g_level.store(static_cast<int>(level), std::memory_order_release);
}

// The current logger, created with the default configuration on first use.
spdlog::logger* current() {
  if (Published* published = g_current.load(std::memory_order_acquire)) {
    return published->logger.get();
  }
  const LogConfig defaults = default_config().log;
  std::string unused;
  auto* created = new Published{make_logger(defaults, unused), nullptr};
  Published* expected = nullptr;
  if (g_current.compare_exchange_strong(expected, created, std::memory_order_acq_rel)) {
    // Only if configure() has not set a level meanwhile (it may run between the two stores).
    int unset = kUnset;
    g_level.compare_exchange_strong(unset, static_cast<int>(defaults.level),
                                    std::memory_order_acq_rel);
    return created->logger.get();
  }
  delete created;  // another thread published first; nobody saw ours
  return expected->logger.get();
}

}  // namespace

void configure(const LogConfig& config) noexcept {
  try {
    std::string fallback_reason;
    publish(make_logger(config, fallback_reason), config.level);
    if (!fallback_reason.empty()) {
      write(LogLevel::kWarn, "cannot open log file '" + config.file + "' (" + fallback_reason +
                                 "); logging to standard error");
    }
  } catch (...) {  // out of memory: keep whatever logger there was
  }
}

bool enabled(LogLevel level) noexcept {
  int threshold = g_level.load(std::memory_order_acquire);
  if (threshold == kUnset) {
    try {
      current();
    } catch (...) {
      return false;
    }
    threshold = g_level.load(std::memory_order_acquire);
  }
  // kOff is the highest level, so a threshold of kOff lets nothing through.
  return level != LogLevel::kOff && static_cast<int>(level) >= threshold;
}

void write(LogLevel level, std::string_view message) noexcept {
  if (level == LogLevel::kOff) return;
  try {
    current()->log(to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
  } catch (...) {  // spdlog reports its own write errors; this is allocation failure
  }
}

void summary(std::string_view line) noexcept {
  try {
    spdlog::logger* logger = current();
    if (logger->level() == spdlog::level::off) return;
    // Straight to the sinks: the summary is written whatever the logger's level (the sinks'
    // own levels are left at trace).
    const spdlog::details::log_msg message(
        spdlog::string_view_t(kLoggerName.data(), kLoggerName.size()), spdlog::level::info,
        spdlog::string_view_t(line.data(), line.size()));
    for (const spdlog::sink_ptr& sink : logger->sinks()) {
      sink->log(message);
      sink->flush();
    }
  } catch (...) {
  }
}

namespace {

// Per rate-limited key, the level of its messages: the report of suppressed ones has the same
// (suppressed spills are info, not warnings).
constinit std::array<std::atomic<int>, static_cast<std::size_t>(RateKey::kCount)>
    g_rate_key_levels{};

}  // namespace

void note_rate_key_level(RateKey key, LogLevel level) noexcept {
  const auto index = static_cast<std::size_t>(key);
  if (index < g_rate_key_levels.size())
    g_rate_key_levels[index].store(static_cast<int>(level), std::memory_order_relaxed);
}

void report_suppressed() noexcept {
  for (std::size_t i = 0; i < static_cast<std::size_t>(RateKey::kCount); ++i) {
    const auto key = static_cast<RateKey>(i);
    const uint64_t suppressed = take_suppressed(key);
    if (suppressed == 0) continue;
    log(static_cast<LogLevel>(g_rate_key_levels[i].load(std::memory_order_relaxed)),
        "(suppressed {} similar messages: {})", suppressed, rate_key_description(key));
  }
}

void flush() noexcept {
  try {
    current()->flush();
  } catch (...) {
  }
}

std::string format_message(fmt::string_view format, fmt::format_args args) {
  return fmt::vformat(format, args);
}

void write_limited(LogLevel level, const RateDecision& decision, std::string message) noexcept {
  try {
    if (decision.suppressed_before > 0)
      message += fmt::format(" (suppressed {} similar messages)", decision.suppressed_before);
    if (decision.last_in_window)
      message += fmt::format(" (further similar messages suppressed for up to {} s)",
                             std::chrono::duration_cast<std::chrono::seconds>(kRateWindow).count());
  } catch (...) {  // write what we have
  }
  write(level, message);
}

}  // namespace vramspill::logging
