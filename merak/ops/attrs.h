// Op attributes: a small typed map (ints, floats, bools, strings, int lists).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace merak::ops {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;
enum class AttrKind : uint8_t { Int, Float, Bool, String, Ints };
const char* attr_kind_name(AttrKind k);
AttrKind attr_kind_of(const AttrValue& v);

class Attrs {
 public:
  Attrs() = default;

  Attrs& set(const std::string& name, int v) { values_[name] = int64_t(v); return *this; }
  Attrs& set(const std::string& name, int64_t v) { values_[name] = v; return *this; }
  Attrs& set(const std::string& name, double v) { values_[name] = v; return *this; }
  Attrs& set(const std::string& name, bool v) { values_[name] = v; return *this; }
  Attrs& set(const std::string& name, const char* v) { values_[name] = std::string(v); return *this; }
  Attrs& set(const std::string& name, std::string v) { values_[name] = std::move(v); return *this; }
  Attrs& set(const std::string& name, std::vector<int64_t> v) { values_[name] = std::move(v); return *this; }
  Attrs& set_value(const std::string& name, AttrValue v) { values_[name] = std::move(v); return *this; }

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  int64_t i(const std::string& name) const;
  double f(const std::string& name) const;  // an Int attribute reads as a float too
  bool b(const std::string& name) const;
  const std::string& s(const std::string& name) const;
  const std::vector<int64_t>& ints(const std::string& name) const;

  const std::map<std::string, AttrValue>& values() const { return values_; }
  std::string str() const;  // "{dim=1, keepdim=true}"

 private:
  const AttrValue& get(const std::string& name) const;
  std::map<std::string, AttrValue> values_;
};

// One attribute of an op's schema. No default means the attribute is required.
struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> default_value;
};

}  // namespace merak::ops
