#include <map>

#include "models/model.h"

namespace merak::models {
namespace {
std::map<std::string, ModelFactory>& factories() {
  static std::map<std::string, ModelFactory> m;
  return m;
}
}  // namespace

void register_model(const std::string& family, ModelFactory factory) {
  MERAK_CHECK(!factories().count(family), "model family '", family, "' registered twice");
  factories()[family] = std::move(factory);
}

std::unique_ptr<Model> make_model(const ModelOptions& options) {
  auto it = factories().find(options.family);
  if (it == factories().end()) {
    std::string known;
    for (const auto& name : model_families()) known += (known.empty() ? "" : ", ") + name;
    MERAK_FAIL("unknown model family '", options.family, "' (known: ", known, ")");
  }
  return it->second(options);
}

nn::BlockOptions block_options(const ModelOptions& o, double proj_std) {
  nn::BlockOptions b;
  b.hidden = o.hidden;
  b.heads = o.heads;
  b.ffn_hidden = o.ffn();
  b.dropout = o.dropout;
  b.ln_eps = o.ln_eps;
  b.init_std = o.init_std;
  b.proj_std = proj_std;
  return b;
}

std::vector<std::string> model_families() {
  std::vector<std::string> names;
  for (const auto& [name, f] : factories()) names.push_back(name);
  return names;
}

}  // namespace merak::models
