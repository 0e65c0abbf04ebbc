// The tools' number flags: the whole text or nothing, and nothing the C parsers would clamp.
#include <catch2/catch.hpp>

#include "tools/common/cli.h"

using namespace merak::cli;

TEST_CASE("whole numbers take the whole text, within int64", "[cli]") {
  CHECK(whole_number("42") == 42);
  CHECK(whole_number("-7") == -7);
  CHECK(whole_number("9223372036854775807") == INT64_MAX);
  for (const char* bad : {"", "4x", "1.5", "9223372036854775808", "-9223372036854775809", "x"})
    CHECK_FALSE(whole_number(bad).has_value());
}

TEST_CASE("unsigned numbers refuse a sign strtoull would wrap, and values past 2^64", "[cli]") {
  CHECK(unsigned_number("0") == 0u);
  CHECK(unsigned_number("18446744073709551615") == UINT64_MAX);
  for (const char* bad : {"", "-1", " -1", "18446744073709551616", "3 ", "0x"})
    CHECK_FALSE(unsigned_number(bad).has_value());
}

TEST_CASE("finite numbers refuse inf, nan and overflow", "[cli]") {
  CHECK(finite_number("0.25") == 0.25);
  CHECK(finite_number("-1e3") == -1000.0);
  for (const char* bad : {"", "inf", "-inf", "nan", "1e999", "1.5.2", "2x"})
    CHECK_FALSE(finite_number(bad).has_value());
}
