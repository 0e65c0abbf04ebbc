// The ONNX import options every tool takes the same way: --input NAME=2x64 (a graph input's
// shape) and --dim SYMBOL=N (a dynamic axis by its symbol). Bad specs are usage errors.
#pragma once

#include <string>

#include "merak/graph/onnx_import.h"
#include "tools/common/cli.h"

namespace merak::cli {

graph::ImportOptions import_options(const std::string& tool, const Args& args);

}  // namespace merak::cli
