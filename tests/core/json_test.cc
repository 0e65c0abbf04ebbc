// The JSON reader: every construct our files use, numbers kept exact, strict about what is not
// JSON, and errors that say where.
#include <catch2/catch.hpp>

#include "merak/core/json.h"

using merak::JsonError;
using merak::JsonValue;
using merak::parse_json;

TEST_CASE("JSON documents parse into objects, arrays, strings and exact numbers", "[json]") {
  const JsonValue v = parse_json(
      " {\"b\": [1, -2, 9223372036854775807, 1.5e3], \"a\": {\"x\": true, \"y\": null},"
      " \"s\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20ac\\ud83d\\ude00\", \"e\": {}, \"f\": []}\n");
  const auto& m = v.members("doc");
  REQUIRE(m.size() == 5);
  CHECK(m[0].first == "b");  // file order, not sorted
  CHECK(m[1].first == "a");
  const auto& b = v.at("b", "doc").array("b");
  REQUIRE(b.size() == 4);
  CHECK(b[0].int64("b0") == 1);
  CHECK(b[1].int64("b1") == -2);
  CHECK(b[2].int64("b2") == 9223372036854775807LL);
  CHECK_THROWS_WITH(b[3].int64("b3"), "b3: expected an integer that fits in 64 bits, found 1.5e3");
  CHECK(v.at("a", "doc").at("x", "a").kind() == JsonValue::Kind::Bool);
  CHECK(v.at("a", "doc").at("y", "a").kind() == JsonValue::Kind::Null);
  CHECK(v.at("s", "doc").string("s") ==
        "q\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  CHECK(v.at("e", "doc").members("e").empty());
  CHECK(v.at("f", "doc").array("f").empty());
  CHECK(v.find("missing") == nullptr);
  CHECK_THROWS_WITH(v.at("missing", "doc"), "doc: no 'missing'");
  CHECK_THROWS_WITH(v.at("s", "doc").array("s"), "s: expected an array, found a string");
  CHECK_THROWS_WITH(parse_json("[99999999999999999999]").array("x")[0].int64("n"),
                    Catch::Contains("fits in 64 bits"));
}

TEST_CASE("what is not JSON is an error naming the byte", "[json]") {
  const std::pair<const char*, const char*> bad[] = {
      {"", "at byte 0: expected a value"},
      {"{\"a\": 1", "at byte 7: expected '}'"},
      {"{\"a\" 1}", "at byte 5: expected ':'"},
      {"[1, 2,]", "at byte 6: expected a value"},
      {"[01]", "at byte 2: expected ']'"},
      {"[1.]", "at byte 3: expected a digit after '.'"},
      {"\"a\nb\"", "at byte 3: expected no control character in a string"},
      {"\"\\x\"", "at byte 2: expected an escape"},
      {"\"\\ud83d\"", "expected the low half of a surrogate pair"},
      {"\"\\ude00\"", "expected no lone low surrogate"},
      {"{} {}", "at byte 3: expected the end of the document"},
      {"tru", "at byte 0: expected a value"},
      {"\"open", "expected the closing '\"'"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    CHECK_THROWS_WITH(parse_json(text), Catch::Contains(message));
  }
  CHECK_THROWS_AS(parse_json(std::string(1000, '[') + std::string(1000, ']')), JsonError);
}
