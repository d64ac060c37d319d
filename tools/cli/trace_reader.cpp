#include "trace_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>

#include "config/config.h"
#include "telemetry/trace_binary_format.h"
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

// One event kind as written: its word, its binary tag and the fields after the device.
struct KindFormat {
  TraceEventKind kind;
  std::string_view word;
  TraceTag tag;
  std::string_view fields;  // for messages
};

constexpr KindFormat kKinds[] = {
    {TraceEventKind::kDevice, kTraceDevice, TraceTag::kDevice,
     "<device> <total bytes> <limit bytes>"},
    {TraceEventKind::kAlloc, kTraceAlloc, TraceTag::kAlloc, "<device> <route> <key> <bytes>"},
    {TraceEventKind::kFree, kTraceFree, TraceTag::kFree, "<device> <route> <key> <bytes>"},
    {TraceEventKind::kRefuse, kTraceRefuse, TraceTag::kRefuse, "<device> <route> <bytes>"},
    {TraceEventKind::kEvict, kTraceEvict, TraceTag::kEvict, "<device> <base> <bytes>"},
    {TraceEventKind::kPromote, kTracePromote, TraceTag::kPromote, "<device> <base> <bytes>"},
    {TraceEventKind::kUse, kTraceUse, TraceTag::kUse, "<device> <stream> <base>..."},
    {TraceEventKind::kLaunches, kTraceLaunches, TraceTag::kLaunches, "<launches> <unreadable>"},
};

// The kind of a record's tag; null for the end record's (and for any unknown tag).
const KindFormat* kind_of_tag(TraceTag tag) {
  for (const KindFormat& known : kKinds) {
    if (known.tag == tag) return &known;
  }
  return nullptr;
}

// A binary record's fields, for messages (trace_binary_format.h): the time first, and a use's
// count of bases before them.
std::string binary_fields(const KindFormat& format) {
  if (format.kind == TraceEventKind::kUse) return "<time> <device> <stream> <count> <base>...";
  return "<time> " + std::string(format.fields);
}

std::string hex_byte(uint8_t byte) {
  constexpr std::string_view kDigits = "0123456789abcdef";
  return {'0', 'x', kDigits[byte >> 4], kDigits[byte & 0xf]};
}

// Why a device ordinal is refused (Note [What a trace may hold]).
std::string device_out_of_range(std::string_view device) {
  return "device " + std::string(device) + " is out of range: expected 0 to " +
         std::to_string(kMaxTraceDevice);
}

// An alloc's or free's size, refused when no job could have written it (Note [What a trace may
// hold]).
template <typename Source>
void check_allocation_bytes(Source& fields, const TraceEvent& event) {
  if (event.bytes > kMaxTraceAllocationBytes) {
    fields.refuse("an allocation of " + std::to_string(event.bytes) +
                  " bytes: more than any address space holds (2^57 bytes)");
  }
  if (event.route == core::Route::kTiered && event.bytes == 0)
    fields.refuse("a tiered block of 0 bytes: tiered mode never makes one");
}

// An event's fields after its time and kind, read from `fields`: a text line's words or a binary
// record's varints (Parser::LineFields, Parser::RecordFields), which word the problems each in
// its own format. One list for both, in the order the writer puts them (TraceFile::Record).
template <typename Source>
void read_fields(Source& fields, TraceEvent& event) {
  if (event.kind != TraceEventKind::kLaunches) event.device = fields.device();
  switch (event.kind) {
    case TraceEventKind::kDevice:
      event.bytes = fields.number("<total bytes>");
      event.limit_bytes = fields.number("<limit bytes>");
      break;
    case TraceEventKind::kAlloc:
    case TraceEventKind::kFree:
      event.route = fields.route();
      event.key = fields.key("<key>");
      event.bytes = fields.number("<bytes>");
      check_allocation_bytes(fields, event);
      break;
    case TraceEventKind::kRefuse:
      event.route = fields.route();
      event.bytes = fields.number("<bytes>");
      break;
    case TraceEventKind::kEvict:
    case TraceEventKind::kPromote:
      event.route = core::Route::kTiered;
      event.key = fields.key("<base>");
      event.bytes = fields.number("<bytes>");
      break;
    case TraceEventKind::kUse:
      event.stream = fields.number("<stream>");
      event.bases = fields.bases();
      break;
    case TraceEventKind::kLaunches:
      event.launches = fields.number("<launches>");
      event.unreadable_launches = fields.number("<unreadable>");
      break;
  }
  fields.finish();
}

class Parser {
 public:
  Parser(std::istream& input, const std::string& name) : input_(input), name_(name) {}

  Trace parse() {
    if (read_header()) {
      read_records();
    } else {
      read_lines();
    }
    return std::move(trace_);
  }

 private:
  // The text format's events, after the header.
  void read_lines() {
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
  }

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
      trace_.dropped_partial_event = true;
      return false;
    }
    header_bytes_ += line.size() + 1;
    return true;
  }

  // The header, the same in both formats; true for a binary trace.
  // The first lines a trace may have, for messages.
  static std::string first_lines() {
    return std::string("'").append(kTraceFirstLine).append("' or '").append(
        kBinaryTraceFirstLine).append("'");
  }

  bool read_header() {
    std::string line;
    if (!next_line(line)) {
      line_number_ = 1;
      fail(std::string(trace_.dropped_partial_event ? "cut short in its first line" : "empty") +
           ": expected " + first_lines() + " as the first line");
    }
    const bool binary = line == kBinaryTraceFirstLine;
    trace_.binary = binary;
    if (line != kTraceFirstLine && !binary) {
      constexpr std::string_view kVersionPrefix = "# vramspill trace ";
      constexpr std::string_view kBinaryVersionPrefix = "# vramspill binary trace ";
      if (line.starts_with(kVersionPrefix)) {
        fail("a trace of format version " + quoted(line.substr(kVersionPrefix.size())) +
             "; this vramspill reads version 1");
      }
      if (line.starts_with(kBinaryVersionPrefix)) {
        fail("a binary trace of format version " +
             quoted(line.substr(kBinaryVersionPrefix.size())) + "; this vramspill reads version 1");
      }
      fail("not a vramspill trace: expected " + first_lines() + " as the first line, found " +
           quoted(line));
    }
    trace_.pid = header_number("# pid");
    trace_.start_unix_ns = header_number("# start_unix_ns");
    constexpr std::string_view kCommand = "# command";
    header_line(line, kCommand);
    if (line.size() > kCommand.size() && line[kCommand.size()] != ' ') {
      fail("expected '# command <command line>', found " + quoted(line));
    }
    trace_.command = line.size() > kCommand.size() ? line.substr(kCommand.size() + 1) : "";
    return binary;
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

  TraceEvent read_event(std::string_view line) const {
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
           ": expected device, alloc, free, refuse, evict, promote, use or launches");
    }
    event.kind = format->kind;
    LineFields fields{*this, words, *format};
    read_fields(fields, event);
    return event;
  }

  // A text line's fields after its kind, each a word: decimal, or hexadecimal with 0x for a key.
  struct LineFields {
    const Parser& parser;
    Words& words;
    const KindFormat& format;

    int device() {
      const std::string_view word = next("<device>");
      const uint64_t value = parser.decimal(word, "<device>");
      if (value > kMaxTraceDevice) parser.fail(device_out_of_range(word));
      return static_cast<int>(value);
    }
    core::Route route() {
      const std::string_view word = next("<route>");
      const std::optional<core::Route> known = core::route_from_token(word);
      if (!known) parser.fail("unknown route " + quoted(word) + ": expected " + route_tokens());
      return *known;
    }
    uint64_t number(std::string_view name) { return parser.decimal(next(name), name); }
    uint64_t key(std::string_view name) { return parser.hexadecimal(next(name), name); }
    // At least one; the line ends where they do.
    std::vector<uint64_t> bases() {
      std::vector<uint64_t> bases{key("<base>")};
      std::string_view word;
      while (words.next(word)) bases.push_back(parser.hexadecimal(word, "<base>"));
      return bases;
    }
    void finish() {
      std::string_view word;
      if (words.next(word)) {
        parser.fail("unexpected " + quoted(word) + " after the " + std::string(format.word) +
                    " event's fields (expected " + written() + ")");
      }
    }
    // The next word, field `name`, which must be there.
    std::string_view next(std::string_view name) {
      std::string_view word;
      if (!words.next(word)) {
        parser.fail("the " + std::string(format.word) + " event ends before " + std::string(name) +
                    " (expected " + written() + ")");
      }
      return word;
    }
    std::string written() const {
      return "'<time> " + std::string(format.word) + " " + std::string(format.fields) + "'";
    }
    [[noreturn]] void refuse(const std::string& what) const { parser.fail(what); }
  };

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

  // The binary format's records, after the header (trace_binary_format.h), read from memory: a
  // trace's events take more room than its records.
  void read_records() {
    const std::string body{std::istreambuf_iterator<char>(input_),
                           std::istreambuf_iterator<char>()};
    if (input_.bad()) fail(std::string("cannot read it: ") + std::strerror(errno));
    body_ = body.data();
    const char* const end = body.data() + body.size();
    const char* at = body_;
    uint64_t end_record = 0;  // where the end record is, once read
    while (at != end) {
      const uint64_t record = offset(at);
      if (trace_.complete) {
        fail_at(record, "a record after the trace's end record (at byte " +
                            std::to_string(end_record) + ")");
      }
      const auto tag = static_cast<uint8_t>(*at);
      if (tag < kFirstTraceTag || tag > kLastTraceTag) {
        fail_at(record, "unknown record tag " + hex_byte(tag) +
                            ": expected a tag from 1 to 9 (device, alloc, free, refuse, evict, "
                            "promote, use, end, launches)");
      }
      const char* payload = at + 1;
      uint64_t length = 0;
      switch (get_varint(payload, end, length)) {
        case VarintRead::kRead:
          break;
        case VarintRead::kCut:  // cut short in its length
          trace_.dropped_partial_event = true;
          return;
        case VarintRead::kTooLong:
          fail_at(record + 1, "bad record length: a number of more than 10 bytes or 64 bits");
      }
      if (length > kMaxTracePayloadBytes) {
        fail_at(record + 1, "a record of " + std::to_string(length) + " bytes: expected at most " +
                                std::to_string(kMaxTracePayloadBytes));
      }
      if (static_cast<uint64_t>(end - payload) < length) {  // cut short in its payload
        trace_.dropped_partial_event = true;
        return;
      }
      Fields fields{payload, payload + length, record};
      if (static_cast<TraceTag>(tag) == TraceTag::kEnd) {
        read_end_record(fields);
        end_record = record;
      } else {
        trace_.events.push_back(read_record(static_cast<TraceTag>(tag), fields));
      }
      at = payload + length;
    }
  }

  // The payload of the record at byte `record`, read in turn.
  struct Fields {
    const char* at;
    const char* end;
    uint64_t record;
  };

  [[noreturn]] void fail_at(uint64_t byte, const std::string& what) const {
    throw TraceError(name_ + ": byte " + std::to_string(byte) + ": " + what);
  }

  // Where `at`, in the records, is in the file.
  uint64_t offset(const char* at) const {
    return header_bytes_ + static_cast<uint64_t>(at - body_);
  }

  void read_end_record(Fields& payload) {
    RecordFields fields{*this, payload, "end", "<event count>"};
    const uint64_t count = fields.number("<event count>");
    fields.finish();
    if (count != trace_.events.size()) {
      fail_at(payload.record,
              "the end record counts " + std::to_string(count) + " events, but the trace holds " +
                  std::to_string(trace_.events.size()) + ": it was changed after it was written");
    }
    trace_.complete = true;
  }

  TraceEvent read_record(TraceTag tag, Fields& payload) const {
    const KindFormat& format = *kind_of_tag(tag);  // read_records() took only known tags
    RecordFields fields{*this, payload, format.word, binary_fields(format)};
    TraceEvent event;
    event.kind = format.kind;
    event.time_ns = fields.number("<time>");
    read_fields(fields, event);
    return event;
  }

  // A binary record's fields, each a varint; problems name their byte in the file.
  struct RecordFields {
    const Parser& parser;
    Fields& payload;
    // For messages: the record's name and the fields it holds.
    std::string_view record_name;
    std::string written;

    int device() {
      const char* const at = payload.at;
      const uint64_t value = number("<device>");
      if (value > kMaxTraceDevice) fail_at(at, device_out_of_range(std::to_string(value)));
      return static_cast<int>(value);
    }
    core::Route route() {
      const char* const at = payload.at;
      const uint64_t index = number("<route>");
      if (index >= core::kRouteCount) {
        fail_at(at, "unknown route " + std::to_string(index) + ": expected 0 (" +
                        std::string(kTraceRouteOrder.front()) + ") to " +
                        std::to_string(core::kRouteCount - 1) + " (" +
                        std::string(kTraceRouteOrder.back()) + ")");
      }
      return static_cast<core::Route>(index);
    }
    // The next field, `name`, which must be there.
    uint64_t number(std::string_view name) {
      const char* const start = payload.at;
      uint64_t value = 0;
      switch (get_varint(payload.at, payload.end, value)) {
        case VarintRead::kRead:
          return value;
        case VarintRead::kCut:
          fail_at(start, "the " + std::string(record_name) + " record at byte " +
                             std::to_string(payload.record) + " ends " +
                             (start == payload.end ? "before " : "inside ") + std::string(name) +
                             " (expected " + written + ")");
        case VarintRead::kTooLong:
          break;
      }
      fail_at(start, "bad number for " + std::string(name) +
                         ": a varint of more than 10 bytes or 64 bits");
    }
    uint64_t key(std::string_view name) { return number(name); }
    // Counted, at least one.
    std::vector<uint64_t> bases() {
      const char* const at = payload.at;
      const uint64_t count = number("<count>");
      if (count == 0) {
        fail_at(at,
                "a use record of no base (expected " + written + ", with a count of at least 1)");
      }
      std::vector<uint64_t> bases;
      for (uint64_t i = 0; i < count; ++i) bases.push_back(number("<base>"));
      return bases;
    }
    void finish() const {
      if (payload.at == payload.end) return;
      const auto left = static_cast<std::size_t>(payload.end - payload.at);
      fail_at(payload.at, std::to_string(left) + (left == 1 ? " byte" : " bytes") +
                              " left after the " + std::string(record_name) +
                              " record's fields (expected " + written + ")");
    }
    [[noreturn]] void fail_at(const char* at, const std::string& what) const {
      parser.fail_at(parser.offset(at), what);
    }
    // At the record's first byte: what is wrong is the record, not one field.
    [[noreturn]] void refuse(const std::string& what) const {
      parser.fail_at(payload.record, "the " + std::string(record_name) + " record: " + what);
    }
  };

  std::istream& input_;
  const std::string& name_;
  uint64_t line_number_ = 0;
  uint64_t header_bytes_ = 0;   // the whole lines read so far: where a binary trace's records start
  const char* body_ = nullptr;  // the records, while read_records() runs
  Trace trace_;
};

}  // namespace

Trace parse_trace(std::istream& input, const std::string& name) {
  return Parser(input, name).parse();
}

std::string_view trace_kind_word(TraceEventKind kind) noexcept {
  for (const KindFormat& known : kKinds) {
    if (known.kind == kind) return known.word;
  }
  return "?";
}

Trace read_trace(const std::string& path) {
  // Note [Only regular files] in config/config.h: /dev/zero would be read without end, and a
  // directory reads as an empty trace.
  std::string problem;
  const int checked = open_regular_file(path, O_RDONLY, 0, problem);
  if (checked < 0) throw TraceError(path + ": cannot read it: " + problem);
  close(checked);
  std::ifstream file(path, std::ios::binary);
  if (!file) throw TraceError(path + ": cannot open it: " + std::strerror(errno));
  return parse_trace(file, path);
}

}  // namespace vramspill::telemetry
