// Incremental GPT inference with a key/value cache: what merak_generate samples with. The same
// computation as Gpt::logits (models/gpt.h), arranged so that each new token costs one pass of
// the token through the blocks and an attention over the cached keys and values (O(T)), instead
// of a forward over the whole sequence (O(T^2)). Runs under no-grad on the device its weights
// were copied to (CPU or CUDA), through the op registry like the training forward.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "models/model.h"

namespace merak::models {

class GptDecoder {
 public:
  // `weights`: every GPT parameter of options' shape by Merak name (Gpt::named_parameters'
  // names), whole; copied to `device` as f32. A missing or misshapen tensor throws naming it.
  GptDecoder(const ModelOptions& options, const std::map<std::string, Tensor>& weights,
             Device device = Device::cpu());

  // The parameters a GPT of `options` has, by name with their shapes (what the constructor needs).
  static std::vector<std::pair<std::string, Shape>> parameter_shapes(const ModelOptions& options);

  // Empties the cache and runs `ids` (1 to max_seq tokens) through the model, filling the cache:
  // logits f32 [ids.size(), vocab] on the device, row i predicting the token after ids[i].
  Tensor logits_for(const std::vector<int64_t>& ids);
  // Appends one token after the cached ones: the logits f32 [vocab] of the token after it.
  // Throws when the cache already holds max_seq tokens (there is no position for it).
  Tensor next(int64_t id);

  int64_t length() const { return length_; }  // tokens in the cache
  int64_t max_seq() const { return options_.max_seq; }
  const ModelOptions& options() const { return options_; }
  Device device() const { return device_; }

 private:
  struct Layer {
    Tensor ln_1_w, ln_1_b, qkv_w, qkv_b, proj_w, proj_b, ln_2_w, ln_2_b, fc_w, fc_b, fc2_w, fc2_b;
    Tensor k, v;  // the cache: [1, heads, length, head_dim]
  };
  // Runs tokens `ids` at positions [length_, length_ + n) through the blocks, appending their
  // keys and values to the cache: logits [n, vocab]. Attention is causal over the whole cache,
  // which needs either an empty cache (the prefill) or a single token (a decoding step).
  Tensor forward(const std::vector<int64_t>& ids);

  ModelOptions options_;
  Device device_;
  Tensor wte_, wpe_, ln_f_w_, ln_f_b_;
  std::vector<Layer> layers_;
  int64_t length_ = 0;
};

}  // namespace merak::models
