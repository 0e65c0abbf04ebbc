#include "merak/ops/attrs.h"

#include "merak/core/error.h"

namespace merak::ops {

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::Bool: return "bool";
    case AttrKind::String: return "string";
    case AttrKind::Ints: return "ints";
  }
  return "?";
}

AttrKind attr_kind_of(const AttrValue& v) { return AttrKind(v.index()); }

const AttrValue& Attrs::get(const std::string& name) const {
  auto it = values_.find(name);
  MERAK_CHECK(it != values_.end(), "missing attribute '", name, "'");
  return it->second;
}

int64_t Attrs::i(const std::string& name) const {
  const AttrValue& v = get(name);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<bool>(&v)) return *p;
  MERAK_FAIL("attribute '", name, "' is ", attr_kind_name(attr_kind_of(v)), ", not int");
}

double Attrs::f(const std::string& name) const {
  const AttrValue& v = get(name);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return double(*p);
  MERAK_FAIL("attribute '", name, "' is ", attr_kind_name(attr_kind_of(v)), ", not float");
}

bool Attrs::b(const std::string& name) const {
  const AttrValue& v = get(name);
  if (auto p = std::get_if<bool>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return *p != 0;
  MERAK_FAIL("attribute '", name, "' is ", attr_kind_name(attr_kind_of(v)), ", not bool");
}

const std::string& Attrs::s(const std::string& name) const {
  const AttrValue& v = get(name);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  MERAK_FAIL("attribute '", name, "' is ", attr_kind_name(attr_kind_of(v)), ", not string");
}

const std::vector<int64_t>& Attrs::ints(const std::string& name) const {
  const AttrValue& v = get(name);
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return *p;
  MERAK_FAIL("attribute '", name, "' is ", attr_kind_name(attr_kind_of(v)), ", not ints");
}

std::string Attrs::str() const {
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : values_) {
    s += (first ? "" : ", ") + k + "=";
    first = false;
    switch (attr_kind_of(v)) {
      case AttrKind::Int: s += std::to_string(std::get<int64_t>(v)); break;
      case AttrKind::Float: s += std::to_string(std::get<double>(v)); break;
      case AttrKind::Bool: s += std::get<bool>(v) ? "true" : "false"; break;
      case AttrKind::String: s += "'" + std::get<std::string>(v) + "'"; break;
      case AttrKind::Ints: {
        s += "[";
        const auto& xs = std::get<std::vector<int64_t>>(v);
        for (size_t i = 0; i < xs.size(); ++i) s += (i ? "," : "") + std::to_string(xs[i]);
        s += "]";
      }
    }
  }
  return s + "}";
}

}  // namespace merak::ops
