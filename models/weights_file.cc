#include "models/weights_file.h"

#include "merak/checkpoint/safetensors.h"
#include "models/gpt.h"

namespace merak::models {

std::map<std::string, Tensor> read_named_weights(const std::string& path,
                                                 const std::vector<std::string>& names) {
  std::map<std::string, Tensor> file;
  bool gpt2_names = false;
  for (auto& [name, t] : checkpoint::load_safetensors(path)) {
    gpt2_names = gpt2_names || name.rfind("transformer.", 0) == 0;
    file[name] = t;
  }
  std::map<std::string, Tensor> out;
  for (const std::string& name : names) {
    if (!gpt2_names) {
      if (auto it = file.find(name); it != file.end()) out[name] = it->second;
      continue;
    }
    const ExternalName x = hf_gpt2_name(name);
    auto it = file.find(x.name);
    if (x.name.empty() || it == file.end()) continue;
    out[name] = x.transpose ? it->second.transpose(0, 1).contiguous() : it->second;
  }
  return out;
}

}  // namespace merak::models
