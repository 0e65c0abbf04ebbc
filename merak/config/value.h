// Reading one YAML value into a config field, strictly (no silent truncation or coercion), and
// writing it back so that reading it again gives the same value.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "merak/config/fields.h"

namespace merak::config::detail {

// Sets *target from `node`. Returns "" on success, else what is wrong, e.g.
// "expected an integer, got 'ten'"; *target is then unchanged.
std::string assign(const YAML::Node& node, const Target& target);

// Writes the value *target holds as one YAML value.
void emit(YAML::Emitter& out, const Target& target);

// The shortest decimal that reads back as exactly `v`: 3e-4 prints as 0.0003, not
// 0.00029999999999999997.
std::string format_double(double v);

// `text` in single quotes, on one line (line breaks escaped) and cut after 60 characters.
std::string quote(const std::string& text);

// "a list", "a map", "no value" or the scalar quoted: for "expected X, got Y" messages.
std::string describe(const YAML::Node& node);

}  // namespace merak::config::detail
