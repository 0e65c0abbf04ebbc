// The value rules a config must satisfy beyond having the right types.
#pragma once

#include <optional>
#include <string>

#include "merak/config/config.h"

namespace merak::config::detail {

struct Problem {
  std::string key;      // the key at fault, "model.heads"
  std::string message;  // what is wrong with it, one line
};

// The first rule `config` breaks, or nothing when it is valid.
std::optional<Problem> first_problem(const Config& config);

}  // namespace merak::config::detail
