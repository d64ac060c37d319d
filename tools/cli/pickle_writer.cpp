#include "pickle_writer.h"

#include <bit>
#include <limits>
#include <stdexcept>

namespace vramspill::cli {
namespace {

// Opcodes (Python's Lib/pickletools.py documents each).
constexpr char kProto = '\x80';
constexpr char kStop = '.';
constexpr char kMark = '(';
constexpr char kEmptyDict = '}';
constexpr char kSetItems = 'u';
constexpr char kEmptyList = ']';
constexpr char kAppends = 'e';
constexpr char kTuple = 't';
constexpr char kEmptyTuple = ')';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kBinFloat = 'G';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kNone = 'N';
constexpr char kBinPut = 'q';
constexpr char kLongBinPut = 'r';
constexpr char kBinGet = 'h';
constexpr char kLongBinGet = 'j';

constexpr uint32_t kBatchItems = 1000;  // Note [Pickles memory_viz reads]

}  // namespace

PickleWriter::PickleWriter(std::ostream& out) : out_(out) {
  op(kProto);
  out_.put(2);
}

void PickleWriter::begin(Kind kind, char opcode) {
  before_value();
  op(opcode);
  open_.push_back(Open{kind});
}

void PickleWriter::end(Kind kind) {
  if (open_.empty() || open_.back().kind != kind) {
    throw std::logic_error("pickle: a container ended that is not the one open");
  }
  const Open closing = open_.back();
  open_.pop_back();
  switch (kind) {
    case Kind::kDict:
      if (closing.in_batch % 2 != 0) throw std::logic_error("pickle: a dict key without a value");
      if (closing.in_batch != 0) op(kSetItems);
      break;
    case Kind::kList:
      if (closing.in_batch != 0) op(kAppends);
      break;
    case Kind::kTuple:
      op(kTuple);  // its MARK came with begin_tuple()
      break;
  }
  after_value();
}

void PickleWriter::begin_dict() { begin(Kind::kDict, kEmptyDict); }
void PickleWriter::end_dict() { end(Kind::kDict); }
void PickleWriter::begin_list() { begin(Kind::kList, kEmptyList); }
void PickleWriter::end_list() { end(Kind::kList); }
void PickleWriter::begin_tuple() { begin(Kind::kTuple, kMark); }
void PickleWriter::end_tuple() { end(Kind::kTuple); }

void PickleWriter::before_value() {
  if (open_.empty()) {
    if (wrote_value_) throw std::logic_error("pickle: a second value at the top level");
    return;
  }
  Open& top = open_.back();
  if (top.kind == Kind::kTuple) return;
  // A batch is closed just before the next item, never right after one, so that remember()
  // still finds the item on top of the unpickler's stack.
  const uint32_t full = top.kind == Kind::kDict ? 2 * kBatchItems : kBatchItems;
  if (top.in_batch == full) {
    op(top.kind == Kind::kDict ? kSetItems : kAppends);
    top.in_batch = 0;
  }
  if (top.in_batch == 0) op(kMark);
}

void PickleWriter::after_value() {
  if (open_.empty()) {
    wrote_value_ = true;
  } else {
    ++open_.back().in_batch;
  }
}

void PickleWriter::little_endian(uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.put(static_cast<char>((value >> (8 * i)) & 0xff));
}

void PickleWriter::string(std::string_view utf8) {
  before_value();
  op(kBinUnicode);
  little_endian(utf8.size(), 4);
  out_.write(utf8.data(), static_cast<std::streamsize>(utf8.size()));
  after_value();
}

void PickleWriter::integer(int64_t value) {
  before_value();
  if (value >= 0 && value <= 0xff) {
    op(kBinInt1);
    little_endian(static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value <= 0xffff) {
    op(kBinInt2);
    little_endian(static_cast<uint64_t>(value), 2);
  } else if (value >= std::numeric_limits<int32_t>::min() &&
             value <= std::numeric_limits<int32_t>::max()) {
    op(kBinInt);
    little_endian(static_cast<uint64_t>(value), 4);
  } else {
    // Two's complement, little-endian, in as few bytes as keep the sign.
    const auto bits = static_cast<uint64_t>(value);
    int bytes = 8;
    while (bytes > 1) {
      const uint64_t top = (bits >> (8 * (bytes - 1))) & 0xff;
      const bool next_negative = ((bits >> (8 * (bytes - 2))) & 0x80) != 0;
      if ((top == 0x00 && !next_negative) || (top == 0xff && next_negative)) {
        --bytes;
      } else {
        break;
      }
    }
    op(kLong1);
    out_.put(static_cast<char>(bytes));
    little_endian(bits, bytes);
  }
  after_value();
}

void PickleWriter::unsigned_integer(uint64_t value) {
  if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    integer(static_cast<int64_t>(value));
    return;
  }
  before_value();
  op(kLong1);  // 8 bytes and a zero one, so that the top bit does not make it negative
  out_.put(9);
  little_endian(value, 8);
  out_.put(0);
  after_value();
}

void PickleWriter::floating(double value) {
  before_value();
  op(kBinFloat);
  const auto bits = std::bit_cast<uint64_t>(value);
  for (int i = 7; i >= 0; --i) out_.put(static_cast<char>((bits >> (8 * i)) & 0xff));
  after_value();
}

void PickleWriter::boolean(bool value) {
  before_value();
  op(value ? kNewTrue : kNewFalse);
  after_value();
}

void PickleWriter::none() {
  before_value();
  op(kNone);
  after_value();
}

uint32_t PickleWriter::remember() {
  const uint32_t id = next_memo_++;
  if (id <= 0xff) {
    op(kBinPut);
    little_endian(id, 1);
  } else {
    op(kLongBinPut);
    little_endian(id, 4);
  }
  return id;
}

void PickleWriter::recall(uint32_t id) {
  if (id >= next_memo_) throw std::logic_error("pickle: recall of an id never remembered");
  before_value();
  if (id <= 0xff) {
    op(kBinGet);
    little_endian(id, 1);
  } else {
    op(kLongBinGet);
    little_endian(id, 4);
  }
  after_value();
}

void PickleWriter::finish() {
  if (!open_.empty()) throw std::logic_error("pickle: finished with a container open");
  if (!wrote_value_) throw std::logic_error("pickle: finished without a value");
  op(kStop);
}

}  // namespace vramspill::cli
