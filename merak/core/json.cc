#include "merak/core/json.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace merak {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

namespace {

const char* kind_name(JsonValue::Kind k) {
  switch (k) {
    case JsonValue::Kind::Null: return "null";
    case JsonValue::Kind::Bool: return "a boolean";
    case JsonValue::Kind::Number: return "a number";
    case JsonValue::Kind::String: return "a string";
    case JsonValue::Kind::Array: return "an array";
    case JsonValue::Kind::Object: return "an object";
  }
  return "?";
}

[[noreturn]] void wrong_kind(const std::string& what, const char* want, JsonValue::Kind got) {
  throw JsonError(what + ": expected " + want + ", found " + kind_name(got));
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += char(cp);
  } else if (cp < 0x800) {
    *out += char(0xc0 | (cp >> 6));
    *out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += char(0xe0 | (cp >> 12));
    *out += char(0x80 | ((cp >> 6) & 0x3f));
    *out += char(0x80 | (cp & 0x3f));
  } else {
    *out += char(0xf0 | (cp >> 18));
    *out += char(0x80 | ((cp >> 12) & 0x3f));
    *out += char(0x80 | ((cp >> 6) & 0x3f));
    *out += char(0x80 | (cp & 0x3f));
  }
}

}  // namespace

const std::string& JsonValue::string(const std::string& what) const {
  if (kind_ != Kind::String) wrong_kind(what, "a string", kind_);
  return text_;
}

int64_t JsonValue::int64(const std::string& what) const {
  if (kind_ != Kind::Number) wrong_kind(what, "an integer", kind_);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text_.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    throw JsonError(what + ": expected an integer that fits in 64 bits, found " + text_);
  return v;
}

const std::vector<JsonValue>& JsonValue::array(const std::string& what) const {
  if (kind_ != Kind::Array) wrong_kind(what, "an array", kind_);
  return items_;
}

const std::vector<std::pair<std::string, JsonValue>>& JsonValue::members(
    const std::string& what) const {
  if (kind_ != Kind::Object) wrong_kind(what, "an object", kind_);
  return members_;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

const JsonValue& JsonValue::at(const std::string& key, const std::string& what) const {
  members(what);
  const JsonValue* v = find(key);
  if (!v) throw JsonError(what + ": no '" + key + "'");
  return *v;
}

// Recursive descent over the text; `at_` is the next byte.
class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}

  JsonValue document() {
    JsonValue v = value(0);
    space();
    if (at_ != s_.size()) error("the end of the document");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;  // deeper is not a file of ours; refuse, don't overflow

  [[noreturn]] void error(const std::string& expected) const {
    throw JsonError("at byte " + std::to_string(at_) + ": expected " + expected);
  }
  void space() {
    while (at_ < s_.size() &&
           (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t'))
      ++at_;
  }
  bool take(char c) {
    space();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) error(std::string("'") + c + "'");
  }
  bool word(const char* w) {
    size_t n = 0;
    while (w[n]) ++n;
    if (s_.compare(at_, n, w) != 0) return false;
    at_ += n;
    return true;
  }

  JsonValue value(int depth) {
    if (depth > kMaxDepth) error("less nesting");
    space();
    if (at_ >= s_.size()) error("a value");
    JsonValue v;
    const char c = s_[at_];
    if (c == '{') {
      ++at_;
      v.kind_ = JsonValue::Kind::Object;
      if (take('}')) return v;
      do {
        space();
        std::string key = string_literal();
        expect(':');
        v.members_.emplace_back(std::move(key), value(depth + 1));
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++at_;
      v.kind_ = JsonValue::Kind::Array;
      if (take(']')) return v;
      do v.items_.push_back(value(depth + 1));
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.kind_ = JsonValue::Kind::String;
      v.text_ = string_literal();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind_ = JsonValue::Kind::Number;
      v.text_ = number();
    } else if (word("true") || word("false")) {  // no file of ours reads a boolean's value
      v.kind_ = JsonValue::Kind::Bool;
    } else if (word("null")) {
      v.kind_ = JsonValue::Kind::Null;
    } else {
      error("a value");
    }
    return v;
  }

  std::string number() {
    const size_t start = at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
      return at_ > from;
    };
    if (s_[at_] == '-') ++at_;
    if (at_ < s_.size() && s_[at_] == '0') ++at_;
    else if (!digits()) error("a digit");
    if (at_ < s_.size() && s_[at_] == '.') {
      ++at_;
      if (!digits()) error("a digit after '.'");
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      if (!digits()) error("an exponent");
    }
    return s_.substr(start, at_ - start);
  }

  uint32_t hex4() {
    if (at_ + 4 > s_.size()) error("4 hex digits");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[at_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') v |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= uint32_t(h - 'A' + 10);
      else error("a hex digit");
    }
    return v;
  }

  std::string string_literal() {
    if (at_ >= s_.size() || s_[at_] != '"') error("a string");
    ++at_;
    std::string out;
    while (true) {
      // The common case: a run of plain bytes, appended at once.
      const size_t from = at_;
      while (at_ < s_.size() && s_[at_] != '"' && s_[at_] != '\\' &&
             static_cast<unsigned char>(s_[at_]) >= 0x20)
        ++at_;
      out.append(s_, from, at_ - from);
      if (at_ >= s_.size()) error("the closing '\"'");
      const char c = s_[at_++];
      if (c == '"') return out;
      if (c != '\\') error("no control character in a string");
      if (at_ >= s_.size()) error("an escape");
      switch (s_[at_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00) {  // a high surrogate: its low half must follow
            if (!word("\\u")) error("the low half of a surrogate pair");
            const uint32_t low = hex4();
            if (low < 0xdc00 || low >= 0xe000) error("the low half of a surrogate pair");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            error("no lone low surrogate");
          }
          append_utf8(cp, &out);
          break;
        }
        default: --at_; error("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
      }
    }
  }

  const std::string& s_;
  size_t at_ = 0;
};

JsonValue parse_json(const std::string& text) { return JsonParser(text).document(); }

}  // namespace merak
