#include "tools/common/import_args.h"

#include <sstream>

namespace merak::cli {

graph::ImportOptions import_options(const std::string& tool, const Args& args) {
  graph::ImportOptions options;
  for (const std::string& spec : args.all("--input")) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      usage_error(tool, "--input wants NAME=2x64, got '" + spec + "'");
    const std::string text = spec.substr(eq + 1);
    if (text.back() == 'x') usage_error(tool, "--input " + spec + ": a dim is missing after 'x'");
    Shape shape;
    std::stringstream dims(text);
    std::string d;
    while (std::getline(dims, d, 'x')) shape.push_back(positive(tool, d, "--input " + spec + " dim"));
    if (!options.input_shapes.emplace(spec.substr(0, eq), shape).second)
      usage_error(tool, "--input " + spec.substr(0, eq) + " is given twice");
  }
  for (const std::string& spec : args.all("--dim")) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      usage_error(tool, "--dim wants SYMBOL=N, got '" + spec + "'");
    options.dim_params[spec.substr(0, eq)] = positive(tool, spec.substr(eq + 1), "--dim " + spec);
  }
  return options;
}

}  // namespace merak::cli
