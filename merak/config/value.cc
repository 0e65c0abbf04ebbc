#include "merak/config/value.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace merak::config::detail {
namespace {

std::string expected(const char* what, const YAML::Node& node) {
  return std::string("expected ") + what + ", got " + describe(node);
}

// Whole-string conversions: strto* stop at the first bad character, so "10x" or "1.5" as an
// integer must be caught by checking that everything was consumed.
bool parse_int64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_uint64(const std::string& s, uint64_t* out) {
  // strtoull accepts "-1" and wraps it to 2^64 - 1; a seed of -1 is a mistake, not a wish.
  if (s.empty() || s.find('-') != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// Config strings are names, paths and choices: a control character in one is a mistake (a lone
// carriage return of an old line ending reads as part of the value, "a100-80g\r", and would
// surface later as an unknown name that prints like a known one). Empty when there is none.
std::string control_character(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char what[96];
      std::snprintf(what, sizeof what,
                    "a string without control characters, got byte 0x%02x at character %zu", c,
                    i + 1);
      return std::string("expected ") + what;
    }
  }
  return "";
}

std::string read(const YAML::Node& node, int64_t* target) {
  int64_t v;
  if (!node.IsScalar() || !parse_int64(node.Scalar(), &v)) return expected("an integer", node);
  *target = v;
  return "";
}

std::string read(const YAML::Node& node, int* target) {
  int64_t v;
  if (!node.IsScalar() || !parse_int64(node.Scalar(), &v)) return expected("an integer", node);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return expected("a 32-bit integer", node);
  }
  *target = static_cast<int>(v);
  return "";
}

std::string read(const YAML::Node& node, uint64_t* target) {
  uint64_t v;
  if (!node.IsScalar() || !parse_uint64(node.Scalar(), &v)) {
    return expected("a non-negative integer", node);
  }
  *target = v;
  return "";
}

std::string read(const YAML::Node& node, double* target) {
  double v;
  if (!node.IsScalar() || !parse_double(node.Scalar(), &v)) return expected("a number", node);
  *target = v;
  return "";
}

std::string read(const YAML::Node& node, bool* target) {
  bool v;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v)) {
    return expected("true or false", node);
  }
  *target = v;
  return "";
}

std::string read(const YAML::Node& node, std::string* target) {
  if (!node.IsScalar()) return expected("a string", node);
  if (std::string bad = control_character(node.Scalar()); !bad.empty()) return bad;
  *target = node.Scalar();
  return "";
}

std::string read(const YAML::Node& node, std::vector<std::string>* target) {
  if (!node.IsSequence()) return expected("a list of strings like [a, b]", node);
  std::vector<std::string> v;
  for (const YAML::Node& item : node) {
    if (!item.IsScalar()) {
      return "expected a list of strings, got an item that is " + describe(item);
    }
    if (std::string bad = control_character(item.Scalar()); !bad.empty()) return bad;
    v.push_back(item.Scalar());
  }
  *target = std::move(v);
  return "";
}

void write(YAML::Emitter& out, const int64_t* v) { out << static_cast<long long>(*v); }
void write(YAML::Emitter& out, const int* v) { out << *v; }
void write(YAML::Emitter& out, const uint64_t* v) { out << static_cast<unsigned long long>(*v); }
void write(YAML::Emitter& out, const double* v) { out << format_double(*v); }
void write(YAML::Emitter& out, const bool* v) { out << YAML::TrueFalseBool << *v; }
// The emitter quotes a string only where plain text would read back differently ("~", "a: b").
void write(YAML::Emitter& out, const std::string* v) { out << *v; }
void write(YAML::Emitter& out, const std::vector<std::string>* v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& s : *v) out << s;
  out << YAML::EndSeq;
}

}  // namespace

std::string format_double(double v) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string quote(const std::string& text) {
  // Messages are one line: escape line breaks, and cut what nobody reads in an error.
  const size_t kMax = 60;
  std::string q = "'";
  for (size_t i = 0; i < text.size() && i < kMax; ++i) {
    if (text[i] == '\n') {
      q += "\\n";
    } else if (text[i] == '\r') {
      q += "\\r";
    } else {
      q += text[i];
    }
  }
  if (text.size() > kMax) q += "...";
  return q + "'";
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return quote(node.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "no value";
  }
}

std::string assign(const YAML::Node& node, const Target& target) {
  return std::visit([&](auto* p) { return read(node, p); }, target);
}

void emit(YAML::Emitter& out, const Target& target) {
  std::visit([&](auto* p) { write(out, p); }, target);
}

}  // namespace merak::config::detail
