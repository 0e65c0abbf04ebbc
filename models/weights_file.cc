#include "models/weights_file.h"

#include <set>

#include "models/gpt.h"

namespace merak::models {

WeightsFile::WeightsFile(const std::string& path) : file_(path) {
  for (const std::string& name : file_.names())
    gpt2_names_ = gpt2_names_ || name.rfind("transformer.", 0) == 0;
}

std::optional<Tensor> WeightsFile::read(const std::string& name) const {
  if (!gpt2_names_) {
    if (!file_.has(name)) return std::nullopt;
    return file_.read(name);
  }
  const ExternalName x = hf_gpt2_name(name);
  if (x.name.empty() || !file_.has(x.name)) return std::nullopt;
  const Tensor t = file_.read(x.name);
  return x.transpose ? t.transpose(0, 1).contiguous() : t;
}

std::vector<std::string> WeightsFile::unused(const std::vector<std::string>& names) const {
  std::set<std::string> used;
  for (const std::string& name : names) used.insert(gpt2_names_ ? hf_gpt2_name(name).name : name);
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::vector<std::string> out;
  for (const std::string& name : file_.names()) {
    if (used.count(name)) continue;
    if (gpt2_names_ && (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")))
      continue;
    out.push_back(name);
  }
  return out;
}

}  // namespace merak::models
