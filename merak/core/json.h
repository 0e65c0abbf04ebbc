// JSON for files we write ourselves and read back: the one string escaper for files written by
// hand (safetensors headers, checkpoint indexes, reports, Chrome traces), and a reader into a
// small tree. The reader keeps numbers as their text (int64 values come back exact) and object
// members in file order; it is strict (RFC 8259) and names the byte offset of the first error.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace merak {

// Quotes, backslashes and control characters escaped; other bytes pass as UTF-8.
std::string json_quote(const std::string& s);

class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JsonValue {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind() const { return kind_; }

  // Typed access; a JsonError naming `what` when the value is of another kind (or, for
  // integers, not an integer that fits in int64).
  const std::string& string(const std::string& what) const;
  int64_t int64(const std::string& what) const;
  const std::vector<JsonValue>& array(const std::string& what) const;
  const std::vector<std::pair<std::string, JsonValue>>& members(const std::string& what) const;
  // An object's member `key`: nullptr when missing (or when this is not an object).
  const JsonValue* find(const std::string& key) const;
  // The same, a JsonError naming `what` and the key when missing.
  const JsonValue& at(const std::string& key, const std::string& what) const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::Null;
  std::string text_;  // a string's value, or a number's text
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// Parses one JSON document (surrounding whitespace allowed). Malformed input: a JsonError with
// the byte offset and what was expected there.
JsonValue parse_json(const std::string& text);

}  // namespace merak
