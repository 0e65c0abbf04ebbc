// A whole model's weights in one safetensors file, under Merak's parameter names or under
// Hugging Face GPT-2's (merak_export --names hf-gpt2, or a file PyTorch users wrote): what
// `model.init_from` reads to start a run from pretrained weights, in any layout.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "merak/checkpoint/safetensors.h"
#include "merak/core/tensor.h"

namespace merak::models {

class WeightsFile {
 public:
  // Opens the file and checks its header (a file with any "transformer." tensor is read under
  // GPT-2's names).
  explicit WeightsFile(const std::string& path);
  // The whole tensor of the parameter Merak calls `name` (a GPT-2 Conv1D weight transposed back
  // to [out, in]), read from the file now; nullopt when the file has none: the caller, which
  // knows the shape it needs, reports it.
  std::optional<Tensor> read(const std::string& name) const;
  // The file's tensors that none of `names` (Merak's parameter names) reads, under the file's
  // own names; GPT-2's attention mask buffers (attn.bias, attn.masked_bias), which are not
  // weights, are not counted.
  std::vector<std::string> unused(const std::vector<std::string>& names) const;

 private:
  checkpoint::SafetensorsReader file_;
  bool gpt2_names_ = false;
};

}  // namespace merak::models
