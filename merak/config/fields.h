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

struct Field {
  std::string section;  // "optimizer"
  std::string name;     // "lr"
  Target target;

  std::string key() const { return section + "." + name; }
};

// Every key of `config`, section by section in the order config.h declares them.
std::vector<Field> fields_of(Config& config);

// The section names, in order: model, data, optimizer, schedule, train, parallel.
const std::vector<std::string>& section_names();

}  // namespace merak::config::detail
