#include "models/weights_file.h"

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

}  // namespace merak::models
