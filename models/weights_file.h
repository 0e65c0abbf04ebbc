// A whole model's weights from one safetensors file, under Merak's parameter names or under
// Hugging Face GPT-2's (merak_export --names hf-gpt2, or a file PyTorch users wrote): what
// `model.init_from` reads to start a run from pretrained weights, in any layout.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::models {

// The file's tensors by Merak name, for the `names` it holds (a file with any "transformer."
// tensor is read under GPT-2's names, its Conv1D weights transposed back to [out, in]). Names it
// lacks are left out: the caller, which knows the shapes it needs, reports them.
std::map<std::string, Tensor> read_named_weights(const std::string& path,
                                                 const std::vector<std::string>& names);

}  // namespace merak::models
