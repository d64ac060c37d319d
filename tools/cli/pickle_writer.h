// A writer of Python pickles (protocol 2) holding plain data: dicts, lists, tuples, str, int,
// float, bool and None. Enough for files Python's pickle.load() and PyTorch's memory_viz read
// (`vramspill export`); no classes, no references to Python code.
//
// Note [Pickles memory_viz reads]
// memory_viz unpickles in JavaScript, with a small machine of its own (PyTorch's
// torch/utils/viz/MemoryViz.js), so this writer uses only opcodes both it and Python know:
// PROTO 2, EMPTY_DICT / EMPTY_LIST / MARK with SETITEMS / APPENDS, MARK ... TUPLE, BINUNICODE,
// BININT1 / BININT2 / BININT / LONG1, BINFLOAT, NEWTRUE / NEWFALSE, NONE, BINPUT / LONG_BINPUT
// and BINGET / LONG_BINGET. Items go in batches of at most 1000, as Python's own pickler
// writes them: memory_viz appends a batch with one JavaScript call taking every item as an
// argument, and a list of a million events in one batch would overflow its stack. Integers
// up to 2^53 arrive in JavaScript exactly; addresses are well below that.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <vector>

namespace vramspill::cli {

class PickleWriter {
 public:
  // Starts a pickle on `out` (which must outlive the writer). Write exactly one value (a
  // container, with everything inside it), then finish().
  explicit PickleWriter(std::ostream& out);

  // Containers: begin, write the items (for a dict: key, value, key, value...), end.
  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();
  void begin_tuple();
  void end_tuple();

  void string(std::string_view utf8);  // the caller's text must be UTF-8
  void integer(int64_t value);
  void unsigned_integer(uint64_t value);
  void floating(double value);
  void boolean(bool value);
  void none();

  // Keeps the value just written (whole: a container after its end) in the pickle's memo and
  // returns its id; recall(id) then writes that same object again in a few bytes. Python
  // (and memory_viz) get one object, shared by every place that names it.
  uint32_t remember();
  void recall(uint32_t id);

  // Ends the pickle. Throws std::logic_error when a container is still open.
  void finish();

 private:
  enum class Kind : uint8_t { kDict, kList, kTuple };
  struct Open {
    Kind kind;
    uint32_t in_batch = 0;  // items (dict: keys and values) since the batch's MARK
  };

  void begin(Kind kind, char opcode);
  void end(Kind kind);
  // Called before each value: closes a full batch, and opens a batch with MARK.
  void before_value();
  void after_value();
  void op(char opcode) { out_.put(opcode); }
  void little_endian(uint64_t value, int bytes);

  std::ostream& out_;
  std::vector<Open> open_;
  uint32_t next_memo_ = 0;
  bool wrote_value_ = false;
};

}  // namespace vramspill::cli
