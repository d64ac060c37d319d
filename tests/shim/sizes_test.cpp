// util/sizes: the spellings README.md promises ("Configuration": 123, 512MiB, 20GiB, 1.5GB, 90%).
#include "util/sizes.h"

#include <gtest/gtest.h>

#include <clocale>
#include <string>

namespace vramspill {
namespace {

TEST(ParseSize, PlainBytesAndUnits) {
  EXPECT_EQ(parse_size("123"), 123u);
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("20GiB"), 20ull << 30);
  EXPECT_EQ(parse_size("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(parse_size("4K"), 4096u);
  EXPECT_EQ(parse_size("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(parse_size("1TiB"), 1ull << 40);
  EXPECT_EQ(parse_size("7B"), 7u);
  EXPECT_EQ(parse_size("1e3"), 1000u);
  EXPECT_EQ(parse_size("64MiB  "), 64ull << 20);  // trailing spaces, as shells leave them
}

TEST(ParseSize, RejectsEverythingElse) {
  for (const char* bad : {"", " ", "MiB", "-1", "+1", " 1", "1 MiB", "1XB", "lots", "1.5.2G", "nan",
                          "inf", "0x10", "90%", "20gib"})
    EXPECT_EQ(parse_size(bad), std::nullopt) << bad;
}

// Note [A size in bytes is whole]: a fraction of a byte is refused; with a larger unit a fraction
// is rounded to the nearest byte.
TEST(ParseSize, RejectsAFractionOfAByte) {
  for (const char* bad : {"0.9", "0.5", "1.5", "2.5B", "1.5e0"})
    EXPECT_EQ(parse_size(bad), std::nullopt) << bad;
  EXPECT_EQ(parse_size("0.3GiB"), 322'122'547u);
  EXPECT_EQ(parse_size("1.5e1"), 15u);
}

TEST(ParseSize, RejectsOverflow) {
  EXPECT_EQ(parse_size("16EiB"), std::nullopt);  // no such unit
  EXPECT_EQ(parse_size("20000000TiB"), std::nullopt);
  EXPECT_EQ(parse_size("18446744073709551616"), std::nullopt);
  EXPECT_TRUE(parse_size("16000000TiB").has_value());
}

// Found by tests/fuzz/fuzz_size: above 2^53 a double cannot hold every integer, so these came
// back off by a few bytes, and 2^64 - 1 rounded up to 2^64 and was refused as an overflow.
TEST(ParseSize, IntegersAreExact) {
  EXPECT_EQ(parse_size("9007199254740993"), 9007199254740993u);
  EXPECT_EQ(parse_size("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_size("18446744073709551615B"), UINT64_MAX);
  EXPECT_EQ(parse_size("18446744073709551KB"), 18446744073709551000u);
  EXPECT_EQ(parse_size("16777215TiB"), 16777215ull << 40);
  EXPECT_EQ(parse_size("16777216TiB"), std::nullopt);  // 2^64
  EXPECT_EQ(parse_size("18446744073709552KB"), std::nullopt);
}

// The shim runs inside programs that may set LC_NUMERIC to a locale whose decimal point is ','.
TEST(ParseSize, IgnoresTheProgramsLocale) {
  const std::string saved = std::setlocale(LC_NUMERIC, nullptr);
  const bool switched = std::setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr ||
                        std::setlocale(LC_NUMERIC, "fr_FR.UTF-8") != nullptr;
  EXPECT_EQ(parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_percent("12.5%"), 0.125);
  std::setlocale(LC_NUMERIC, saved.c_str());
  if (!switched) GTEST_SKIP() << "no de_DE/fr_FR locale installed; checked in the C locale only";
}

TEST(ParseRate, PositiveNumbersAndSizes) {
  EXPECT_EQ(parse_rate("4.8e12"), 4.8e12);
  EXPECT_EQ(parse_rate("50GB"), 50e9);
  EXPECT_EQ(parse_rate("0"), std::nullopt);
  EXPECT_EQ(parse_rate("fast"), std::nullopt);
}

// Found by tests/fuzz/fuzz_size: the number was checked to be finite, but not once scaled.
TEST(ParseRate, RejectsOverflowToInfinity) {
  EXPECT_EQ(parse_rate("16000e300T"), std::nullopt);
  EXPECT_EQ(parse_rate("1e308KB"), std::nullopt);
  EXPECT_EQ(parse_rate("1e290T"), 1e290 * 1099511627776.0);
}

TEST(ParsePercent, FractionsOfOne) {
  EXPECT_EQ(parse_percent("90%"), 0.9);
  EXPECT_EQ(parse_percent("100%"), 1.0);
  EXPECT_EQ(parse_percent("0%"), 0.0);
  EXPECT_EQ(parse_percent("250%"), 2.5);  // the caller checks the range
  for (const char* bad : {"", "%", "90", "-5%", "90 %", "ninety%", "90%%"})
    EXPECT_EQ(parse_percent(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace vramspill
