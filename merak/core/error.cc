#include "merak/core/error.h"

namespace merak::detail {

void throw_error(const char* file, int line, const std::string& msg) {
  std::string where = file;
  auto slash = where.rfind("merak/");
  if (slash != std::string::npos) where = where.substr(slash);
  throw Error(msg + " [" + where + ":" + std::to_string(line) + "]");
}

}  // namespace merak::detail
