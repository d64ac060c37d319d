#include "telemetry/trace_reader.h"

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <string_view>

#include "telemetry/trace_format.h"

namespace vramspill::telemetry {
namespace {

// The words of a line, split at single spaces (the writer puts exactly one between fields).
class Words {
 public:
  explicit Words(std::string_view line) : rest_(line) {}
  // The next word in `word`; false when the line has no more.
  bool next(std::string_view& word) {
    if (done_) return false;
    const std::size_t space = rest_.find(' ');
    word = rest_.substr(0, space);
    if (space == std::string_view::npos) {
      done_ = true;
    } else {
      rest_.remove_prefix(space + 1);
    }
    return true;
  }

 private:
  std::string_view rest_;
  bool done_ = false;
};

// `text` quoted for a message, shortened when long.
std::string quoted(std::string_view text) {
  constexpr std::size_t kMax = 60;
  std::string out = "'";
  out += text.substr(0, kMax);
  if (text.size() > kMax) out += "...";
  return out + "'";
}

std::string route_tokens() {
  std::string out;
  for (std::size_t index = 0; index < core::kRouteCount; ++index) {
    if (index != 0) out += index + 1 == core::kRouteCount ? " or " : ", ";
    out += core::route_token(static_cast<core::Route>(index));
  }
  return out;
}

// One event kind as written: its word and the fields after the device.
struct KindFormat {
  TraceEventKind kind;
  std::string_view word;
  std::string_view fields;  // for messages
};

constexpr KindFormat kKinds[] = {
    {TraceEventKind::kDevice, kTraceDevice, "<device> <total bytes> <limit bytes>"},
    {TraceEventKind::kAlloc, kTraceAlloc, "<device> <route> <key> <bytes>"},
    {TraceEventKind::kFree, kTraceFree, "<device> <route> <key> <bytes>"},
    {TraceEventKind::kRefuse, kTraceRefuse, "<device> <route> <bytes>"},
    {TraceEventKind::kEvict, kTraceEvict, "<device> <base> <bytes>"},
    {TraceEventKind::kPromote, kTracePromote, "<device> <base> <bytes>"},
    {TraceEventKind::kUse, kTraceUse, "<device> <stream> <base>..."},
};

class Parser {
 public:
  Parser(std::istream& input, const std::string& name) : input_(input), name_(name) {}

  Trace parse() {
    read_header();
    std::string line;
    uint64_t end_line = 0;
    while (next_line(line)) {
      if (line.starts_with('#')) {
        if (!is_end_line(line)) continue;  // a comment
        read_end(line);
        end_line = line_number_;
        continue;
      }
      if (trace_.complete) {
        fail("an event after the trace's '# end' line (line " + std::to_string(end_line) + ")");
      }
      trace_.events.push_back(read_event(line));
    }
    return std::move(trace_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw TraceError(name_ + ":" + std::to_string(line_number_) + ": " + what);
  }

  // The next whole line; false at the end. A last line without its newline was cut short
  // while being written: it is left out, and noted.
  bool next_line(std::string& line) {
    if (!std::getline(input_, line)) {
      if (input_.bad()) fail(std::string("cannot read it: ") + std::strerror(errno));
      return false;
    }
    ++line_number_;
    if (input_.eof()) {
      trace_.dropped_partial_line = true;
      return false;
    }
    return true;
  }

  void read_header() {
    std::string line;
    if (!next_line(line)) {
      line_number_ = 1;
      fail(std::string(trace_.dropped_partial_line ? "cut short in its first line" : "empty") +
           ": expected '" + std::string(kTraceFirstLine) + "' as the first line");
    }
    if (line != kTraceFirstLine) {
      constexpr std::string_view kVersionPrefix = "# vramspill trace ";
      if (line.starts_with(kVersionPrefix)) {
        fail("a trace of format version " + quoted(line.substr(kVersionPrefix.size())) +
             "; this vramspill reads version 1");
      }
      fail("not a vramspill trace: expected '" + std::string(kTraceFirstLine) +
           "' as the first line, found " + quoted(line));
    }
    trace_.pid = header_number("# pid");
    trace_.start_unix_ns = header_number("# start_unix_ns");
    constexpr std::string_view kCommand = "# command";
    header_line(line, kCommand);
    if (line.size() > kCommand.size() && line[kCommand.size()] != ' ') {
      fail("expected '# command <command line>', found " + quoted(line));
    }
    trace_.command = line.size() > kCommand.size() ? line.substr(kCommand.size() + 1) : "";
  }

  // The next line, which must start with `prefix` (a header line's name).
  void header_line(std::string& line, std::string_view prefix) {
    // Appended, not "'" + ...: GCC 12 at -O3 warns falsely (-Wrestrict) on literal + string.
    const std::string expected = std::string("'").append(prefix).append(" ...'");
    if (!next_line(line)) {
      ++line_number_;
      fail("the trace ends in its header: expected " + expected);
    }
    if (!line.starts_with(prefix)) fail("expected " + expected + ", found " + quoted(line));
  }

  uint64_t header_number(std::string_view prefix) {
    std::string line;
    header_line(line, prefix);
    if (line.size() <= prefix.size() || line[prefix.size()] != ' ') {
      fail("expected '" + std::string(prefix) + " <number>', found " + quoted(line));
    }
    return decimal(std::string_view(line).substr(prefix.size() + 1), prefix.substr(2));
  }

  static bool is_end_line(std::string_view line) {
    Words words(line);
    std::string_view hash;
    std::string_view end;
    return words.next(hash) && words.next(end) && end == "end";
  }

  void read_end(std::string_view line) {
    if (trace_.complete) fail("a second '# end' line");
    Words words(line);
    std::string_view word;
    std::string_view count;
    std::string_view events;
    if (!words.next(word) || !words.next(word) || !words.next(count) || !words.next(events) ||
        events != "events" || words.next(word)) {
      fail("expected '# end <count> events', found " + quoted(line));
    }
    const uint64_t written = decimal(count, "event count");
    if (written != trace_.events.size()) {
      fail("the '# end' line counts " + std::to_string(written) + " events, but the trace holds " +
           std::to_string(trace_.events.size()) + ": it was changed after it was written");
    }
    trace_.complete = true;
  }

  TraceEvent read_event(std::string_view line) {
    Words words(line);
    std::string_view word;
    TraceEvent event;
    words.next(word);
    event.time_ns = decimal(word, "time");
    if (!words.next(word)) fail("expected an event kind after the time, found the line's end");
    const KindFormat* format = nullptr;
    for (const KindFormat& known : kKinds) {
      if (known.word == word) format = &known;
    }
    if (format == nullptr) {
      fail("unknown event kind " + quoted(word) +
           ": expected device, alloc, free, refuse, evict, promote or use");
    }
    event.kind = format->kind;
    // The next field, which must be there.
    const auto field = [&](std::string_view name) {
      if (!words.next(word)) {
        fail("the " + std::string(format->word) + " event ends before " + std::string(name) +
             " (expected '<time> " + std::string(format->word) + " " + std::string(format->fields) +
             "')");
      }
      return word;
    };
    event.device = device_number(field("<device>"));
    switch (event.kind) {
      case TraceEventKind::kDevice:
        event.bytes = decimal(field("<total bytes>"), "<total bytes>");
        event.limit_bytes = decimal(field("<limit bytes>"), "<limit bytes>");
        break;
      case TraceEventKind::kAlloc:
      case TraceEventKind::kFree:
        event.route = route(field("<route>"));
        event.key = hexadecimal(field("<key>"), "<key>");
        event.bytes = decimal(field("<bytes>"), "<bytes>");
        break;
      case TraceEventKind::kRefuse:
        event.route = route(field("<route>"));
        event.bytes = decimal(field("<bytes>"), "<bytes>");
        break;
      case TraceEventKind::kEvict:
      case TraceEventKind::kPromote:
        event.route = core::Route::kTiered;
        event.key = hexadecimal(field("<base>"), "<base>");
        event.bytes = decimal(field("<bytes>"), "<bytes>");
        break;
      case TraceEventKind::kUse:
        event.stream = decimal(field("<stream>"), "<stream>");
        event.bases.push_back(hexadecimal(field("<base>"), "<base>"));
        while (words.next(word)) event.bases.push_back(hexadecimal(word, "<base>"));
        break;
    }
    if (words.next(word)) {
      fail("unexpected " + quoted(word) + " after the " + std::string(format->word) +
           " event's fields (expected '<time> " + std::string(format->word) + " " +
           std::string(format->fields) + "')");
    }
    return event;
  }

  uint64_t decimal(std::string_view word, std::string_view field) const {
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (word.empty() || error != std::errc{} || end != word.data() + word.size()) {
      fail("bad number " + quoted(word) + " for " + std::string(field) +
           ": expected a decimal number of up to 20 digits");
    }
    return value;
  }

  uint64_t hexadecimal(std::string_view word, std::string_view field) const {
    uint64_t value = 0;
    const std::string_view digits = word.substr(word.starts_with("0x") ? 2 : word.size());
    const auto [end, error] =
        std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
    if (digits.empty() || error != std::errc{} || end != digits.data() + digits.size()) {
      fail("bad number " + quoted(word) + " for " + std::string(field) +
           ": expected a hexadecimal number with 0x, of up to 16 digits");
    }
    return value;
  }

  int device_number(std::string_view word) const {
    const uint64_t value = decimal(word, "<device>");
    if (value > INT_MAX) fail("device " + std::string(word) + " is out of range");
    return static_cast<int>(value);
  }

  core::Route route(std::string_view word) const {
    const std::optional<core::Route> known = core::route_from_token(word);
    if (!known) fail("unknown route " + quoted(word) + ": expected " + route_tokens());
    return *known;
  }

  std::istream& input_;
  const std::string& name_;
  uint64_t line_number_ = 0;
  Trace trace_;
};

}  // namespace

Trace parse_trace(std::istream& input, const std::string& name) {
  return Parser(input, name).parse();
}

Trace read_trace(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw TraceError(path + ": cannot open it: " + std::strerror(errno));
  return parse_trace(file, path);
}

}  // namespace vramspill::telemetry
