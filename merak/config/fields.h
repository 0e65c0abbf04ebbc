// The table of every config key: its dotted name and the member of Config it sets. Reading a
// file, applying --set overrides and writing YAML all walk this one table, so a new field is
// added to config.h and here, and nowhere else.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "merak/config/config.h"

namespace merak::config::detail {

// Where a key's value lives; the pointee's type decides how the YAML value is read and written.
using Target = std::variant<int64_t*, int*, uint64_t*, double*, bool*, std::string*,
                            std::vector<std::string>*>;

// A name may hold one dot: "loss_scale.initial" is key "initial" of the group "loss_scale",
// written as a map nested in its section. A group's fields are adjacent in the table.
struct Field {
  std::string section;  // "optimizer"
  std::string name;     // "lr"
  Target target;

  std::string key() const { return section + "." + name; }
  // "train.loss_scale" for a grouped field, "" otherwise.
  std::string group() const {
    const size_t dot = name.find('.');
    return dot == std::string::npos ? "" : section + "." + name.substr(0, dot);
  }
};

// Every key of `config`, section by section in the order config.h declares them.
std::vector<Field> fields_of(Config& config);

// The section names, in order: model, data, optimizer, schedule, train, parallel.
const std::vector<std::string>& section_names();

}  // namespace merak::config::detail
