#include "core/stats.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/host_clock.h"
#include "core/remap_check.h"

namespace simcuda {
namespace {

constexpr std::string_view kNote =
    "simcuda is a simulated CUDA driver: all times and traffic are modeled from the cost model "
    "and the configured bandwidths, never measured on a GPU";

// A small hand-written JSON writer (simcuda links no JSON library): two-space indentation, one
// member or element per line, strings escaped per RFC 8259.
class JsonWriter {
 public:
  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }

  void key(std::string_view name) {
    separate();
    append_string(name);
    out_ += ": ";
    after_key_ = true;
  }
  void value(std::string_view text) {
    separate();
    append_string(text);
  }
  void value(const char* text) { value(std::string_view(text)); }
  void value(bool flag) {
    separate();
    out_ += flag ? "true" : "false";
  }
  void value(uint64_t number) {
    separate();
    out_ += std::to_string(number);
  }
  void value(double number) {
    separate();
    if (!std::isfinite(number)) {  // JSON has no infinities or NaNs
      out_ += "null";
      return;
    }
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, number);  // shortest exact
    out_.append(buffer, result.ptr);
  }

  std::string finish() { return std::move(out_) + "\n"; }

 private:
  // Before a value or key: the comma and line break that separate it from the previous one.
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (levels_.empty()) return;
    if (!levels_.back()) out_ += ',';
    levels_.back() = false;
    out_ += '\n';
    out_.append(2 * levels_.size(), ' ');
  }
  void open(char bracket) {
    separate();
    out_ += bracket;
    levels_.push_back(true);
  }
  void close(char bracket) {
    const bool empty = levels_.back();
    levels_.pop_back();
    if (!empty) {
      out_ += '\n';
      out_.append(2 * levels_.size(), ' ');
    }
    out_ += bracket;
  }
  void append_string(std::string_view text) {
    out_ += '"';
    for (const char c : text) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '\r':
          out_ += "\\r";
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
            out_ += escaped;
          } else {
            out_ += c;  // UTF-8 passes through unchanged
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> levels_;  // per open bracket: nothing written inside it yet
  bool after_key_ = false;
};

const char* kind_name(Stream::Kind kind) {
  switch (kind) {
    case Stream::Kind::kLegacyDefault:
      return "legacy_default";
    case Stream::Kind::kPerThreadDefault:
      return "per_thread_default";
    case Stream::Kind::kCreated:
      return "created";
  }
  return "unknown";
}

struct StreamRecord {
  int device;
  uint64_t id;
  const char* kind;
  double modeled_seconds;
};

std::vector<StreamRecord> stream_records() {
  std::vector<StreamRecord> records;
  for_each_context([&](Context& context) {
    for (const Stream* stream : context.all_streams())
      records.push_back({context.device->ordinal(), stream->id(), kind_name(stream->kind()),
                         stream->modeled_clock()});
  });
  std::sort(records.begin(), records.end(),
            [](const StreamRecord& a, const StreamRecord& b) { return a.id < b.id; });
  return records;
}

void write_device(JsonWriter& json, Device& device, const std::vector<StreamRecord>& streams) {
  const auto count = [](const std::atomic<uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  const DeviceCounters& counters = device.counters();
  json.begin_object();
  json.key("ordinal");
  json.value(static_cast<uint64_t>(device.ordinal()));
  const std::pair<const char*, uint64_t> fields[] = {
      {"total_bytes", device.total_bytes()},
      {"used_bytes", device.used_bytes()},
      {"peak_device_bytes", device.peak_bytes()},
      {"link_bytes_copies", count(counters.link_bytes_copies)},
      {"link_bytes_zero_copy", count(counters.link_bytes_zero_copy)},
      {"link_bytes_migrations", count(counters.link_bytes_migrations)},
      {"device_bytes_touched", count(counters.device_bytes_touched)},
      {"managed_faults", count(counters.managed_faults)},
      {"managed_evictions", count(counters.managed_evictions)},
      {"kernel_launches", count(counters.kernel_launches)},
  };
  for (const auto& [name, number] : fields) {
    json.key(name);
    json.value(number);
  }
  json.key("streams");
  json.begin_array();
  for (const StreamRecord& stream : streams) {
    if (stream.device != device.ordinal()) continue;
    json.begin_object();
    json.key("id");
    json.value(stream.id);
    json.key("kind");
    json.value(stream.kind);
    json.key("modeled_seconds");
    json.value(stream.modeled_seconds);
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

pid_t registering_process = 0;

void write_at_exit() {
  // A child forked after cuInit inherits the handler; the statistics are the parent's to write.
  if (getpid() != registering_process) return;
  Driver* driver = Driver::instance();
  if (driver == nullptr) return;
  const std::string& path = driver->config().stats_path;
  const std::string document = stats_json(*driver);
  // Written in place (not renamed into place), so /dev/stdout and the like work too.
  std::FILE* file = std::fopen(path.c_str(), "w");
  bool written = file != nullptr;
  const int open_error = errno;
  if (file != nullptr) {
    written = std::fwrite(document.data(), 1, document.size(), file) == document.size();
    written = std::fclose(file) == 0 && written;
  }
  if (!written)
    std::fprintf(stderr, "simcuda: cannot write SIMCUDA_STATS=%s: %s\n", path.c_str(),
                 std::strerror(file == nullptr ? open_error : errno));
}

}  // namespace

std::string stats_json(Driver& driver) {
  const std::vector<StreamRecord> streams = stream_records();
  JsonWriter json;
  json.begin_object();
  json.key("simcuda_stats_version");
  json.value(uint64_t{2});
  json.key("modeled");
  json.value(true);
  json.key("note");
  json.value(kNote);
  json.key("cost_model");
  json.begin_object();
  json.key("hbm_bytes_per_second");
  json.value(driver.config().cost.hbm_bytes_per_second);
  json.key("link_bytes_per_second");
  json.value(driver.config().cost.link_bytes_per_second);
  json.end_object();
  json.key("host_modeled_seconds");
  json.value(host_modeled_seconds());
  json.key("remap_violations");
  json.value(remap_violations());
  json.key("devices");
  json.begin_array();
  for (int ordinal = 0; ordinal < driver.device_count(); ++ordinal)
    write_device(json, *driver.device(ordinal), streams);
  json.end_array();
  json.end_object();
  return json.finish();
}

void register_stats_writer() {
  Driver* driver = Driver::instance();
  if (driver == nullptr || driver->config().stats_path.empty()) return;
  registering_process = getpid();
  if (std::atexit(write_at_exit) != 0)
    std::fprintf(stderr, "simcuda: cannot arrange to write SIMCUDA_STATS at exit\n");
}

}  // namespace simcuda
