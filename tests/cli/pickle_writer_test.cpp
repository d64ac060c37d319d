// The pickle writer (tools/cli/pickle_writer.h): scalars byte for byte as Python's own pickler
// writes them (the expected bytes are pickle.dumps(value, protocol=2) from python3), and a
// value holding every type loaded by python3 and compared with what it should be.
#include "pickle_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#ifndef VRAMSPILL_TEST_PYTHON
#error "the build defines VRAMSPILL_TEST_PYTHON (tests/cli/CMakeLists.txt)"
#endif

namespace vramspill::cli {
namespace {

std::string pickled(const std::function<void(PickleWriter&)>& write) {
  std::ostringstream out;
  PickleWriter pickle(out);
  write(pickle);
  pickle.finish();
  return out.str();
}

std::string pickled_integer(int64_t value) {
  return pickled([&](PickleWriter& pickle) { pickle.integer(value); });
}

using namespace std::string_literals;

TEST(PickleWriter, WritesIntegersAsPythonDoes) {
  EXPECT_EQ(pickled_integer(0), "\x80\x02K\x00."s);
  EXPECT_EQ(pickled_integer(255), "\x80\x02K\xff."s);
  EXPECT_EQ(pickled_integer(256), "\x80\x02M\x00\x01."s);
  EXPECT_EQ(pickled_integer(65535), "\x80\x02M\xff\xff."s);
  EXPECT_EQ(pickled_integer(65536), "\x80\x02J\x00\x00\x01\x00."s);
  EXPECT_EQ(pickled_integer(-1), "\x80\x02J\xff\xff\xff\xff."s);
  EXPECT_EQ(pickled_integer(2147483647), "\x80\x02J\xff\xff\xff\x7f."s);
  EXPECT_EQ(pickled_integer(-2147483648), "\x80\x02J\x00\x00\x00\x80."s);
  EXPECT_EQ(pickled_integer(2147483648), "\x80\x02\x8a\x05\x00\x00\x00\x80\x00."s);
  EXPECT_EQ(pickled_integer(-2147483649), "\x80\x02\x8a\x05\xff\xff\xff\x7f\xff."s);
  EXPECT_EQ(pickled_integer(0x7f3a00000000), "\x80\x02\x8a\x06\x00\x00\x00\x00:\x7f."s);
  EXPECT_EQ(pickled_integer(std::numeric_limits<int64_t>::max()),
            "\x80\x02\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f."s);
}

TEST(PickleWriter, WritesUnsignedIntegersAboveInt64) {
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.unsigned_integer(1ULL << 63); }),
            "\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00."s);
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.unsigned_integer(UINT64_MAX); }),
            "\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00."s);
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.unsigned_integer(300); }),
            "\x80\x02M\x2c\x01."s);
}

TEST(PickleWriter, WritesOtherScalarsAsPythonDoes) {
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.boolean(true); }), "\x80\x02\x88."s);
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.boolean(false); }), "\x80\x02\x89."s);
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.none(); }), "\x80\x02N."s);
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.floating(1.5); }),
            "\x80\x02G?\xf8\x00\x00\x00\x00\x00\x00."s);
  // Python memoizes the string too ("q\x00" after it); the string's own bytes are these.
  EXPECT_EQ(pickled([](PickleWriter& pickle) { pickle.string("\xc3\xa9"); }),
            "\x80\x02X\x02\x00\x00\x00\xc3\xa9."s);
}

// Note [Pickles memory_viz reads]: no batch of more than 1000 items.
TEST(PickleWriter, WritesItemsInBatchesOfAThousand) {
  const std::string list = pickled([](PickleWriter& pickle) {
    pickle.begin_list();
    for (int i = 0; i < 2001; ++i) pickle.integer(1);
    pickle.end_list();
  });
  std::string thousand;
  for (int i = 0; i < 1000; ++i) thousand += "K\x01";
  EXPECT_EQ(list, "\x80\x02](" + thousand + "e(" + thousand + "e(K\x01" + "e.");

  const std::string dict = pickled([](PickleWriter& pickle) {
    pickle.begin_dict();
    for (int i = 0; i < 1001; ++i) {
      pickle.integer(2);
      pickle.integer(1);
    }
    pickle.end_dict();
  });
  std::string pairs;
  for (int i = 0; i < 1000; ++i) pairs += "K\x02K\x01";
  EXPECT_EQ(dict, "\x80\x02}(" + pairs + "u(K\x02K\x01u.");
}

TEST(PickleWriter, RefusesUnbalancedContainers) {
  std::ostringstream out;
  PickleWriter pickle(out);
  pickle.begin_dict();
  pickle.string("key");
  EXPECT_THROW(pickle.end_list(), std::logic_error);
  EXPECT_THROW(pickle.end_dict(), std::logic_error);  // a key without its value
  EXPECT_THROW(pickle.finish(), std::logic_error);
}

// Writes a value holding every type and batches of more than 1000 items, and has python3 load
// it and compare it with the same value written in Python.
TEST(PickleWriter, Python3LoadsEveryType) {
  char path[] = "/tmp/vramspill-pickle-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream file(path, std::ios::binary);
    PickleWriter pickle(file);
    pickle.begin_dict();
    pickle.string("ints");
    pickle.begin_list();
    for (const int64_t value :
         {int64_t{0}, int64_t{255}, int64_t{256}, int64_t{-1}, int64_t{1} << 40,
          -(int64_t{1} << 40), std::numeric_limits<int64_t>::min()}) {
      pickle.integer(value);
    }
    pickle.unsigned_integer(UINT64_MAX);
    pickle.end_list();
    pickle.string("text");
    pickle.string("vramspill: spilled \xe2\x86\x92 host");
    pickle.string("scalars");
    pickle.begin_tuple();
    pickle.floating(-0.25);
    pickle.boolean(true);
    pickle.boolean(false);
    pickle.none();
    pickle.end_tuple();
    pickle.string("empty");
    pickle.begin_tuple();
    pickle.end_tuple();
    pickle.string("many");
    pickle.begin_list();
    for (int64_t i = 0; i < 2500; ++i) pickle.integer(i);
    pickle.end_list();
    pickle.string("big_dict");
    pickle.begin_dict();
    for (int64_t i = 0; i < 2100; ++i) {
      pickle.string(std::string("k").append(std::to_string(i)));
      pickle.integer(i);
    }
    pickle.end_dict();
    pickle.string("shared");
    pickle.begin_list();
    pickle.begin_list();
    pickle.string("frame");
    pickle.end_list();
    const uint32_t id = pickle.remember();
    for (int i = 0; i < 300; ++i) pickle.recall(id);
    pickle.end_list();
    pickle.end_dict();
    pickle.finish();
  }
  const std::string check =
      "import pickle, sys\n"
      "v = pickle.load(open(sys.argv[1], 'rb'))\n"
      "expected = {'ints': [0, 255, 256, -1, 1 << 40, -(1 << 40), -(1 << 63), (1 << 64) - 1],\n"
      "  'text': 'vramspill: spilled \\u2192 host', 'scalars': (-0.25, True, False, None),\n"
      "  'empty': (), 'many': list(range(2500)),\n"
      "  'big_dict': {'k%d' % i: i for i in range(2100)}, 'shared': [['frame']] * 301}\n"
      "assert v == expected, v\n"
      "assert all(x is v['shared'][0] for x in v['shared']), 'recall made copies'\n";
  const std::string script = std::string(path) + ".py";
  std::ofstream(script) << check;
  const std::string command =
      std::string(VRAMSPILL_TEST_PYTHON) + " " + script + " " + path + " 2>&1";
  const int status = std::system(command.c_str());
  unlink(path);
  unlink(script.c_str());
  EXPECT_EQ(status, 0) << "python3 did not load what was written";
}

}  // namespace
}  // namespace vramspill::cli
