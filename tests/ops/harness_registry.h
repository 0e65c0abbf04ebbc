// The cases registered by MERAK_OP_CASES, by op name (read by the harness runner).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/ops/harness.h"

namespace merak::test {
std::map<std::string, std::vector<CaseFactory>>& case_factories();
}
