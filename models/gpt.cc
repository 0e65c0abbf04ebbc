#include "models/gpt.h"

#include <cmath>
#include <map>
#include <regex>

#include "merak/autograd/checkpoint.h"
#include "merak/ops/functional.h"
#include "models/positions.h"

namespace merak::models {

Gpt::Gpt(const ModelOptions& o)
    : wte(add<nn::Embedding>("wte", o.vocab, o.hidden, o.init_std)),
      wpe(add<nn::Embedding>("wpe", o.max_seq, o.hidden, o.init_std)),
      blocks(add<nn::ModuleList>("blocks")),
      ln_f(add<nn::LayerNorm>("ln_f", o.hidden, o.ln_eps)),
      options_(o),
      drop_(add<nn::Dropout>("drop", o.dropout)) {
  const nn::BlockOptions b = block_options(o, o.init_std / std::sqrt(2.0 * double(o.layers)));
  for (int64_t i = 0; i < o.layers; ++i) blocks.append<nn::PreLnBlock>(b);
}

Tensor Gpt::hidden_states(const Tensor& tokens) const {
  MERAK_CHECK(tokens.dim() == 2, "gpt: tokens must be [batch, seq], got ", tokens.str());
  const int64_t t = tokens.size(1);
  MERAK_CHECK(t <= options_.max_seq, "gpt: sequence length ", t, " exceeds model.max_seq ",
              options_.max_seq);
  Tensor x = ops::add(wte.forward(tokens), wpe.forward(positions(tokens)));
  x = drop_.forward(x);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& block = blocks.at<nn::PreLnBlock>(i);
    if (recompute() && training()) {
      auto segment = [&block](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{block.forward(in[0])};
      };
      x = autograd::checkpoint(segment, {x})[0];
    } else {
      x = block.forward(x);
    }
  }
  return ln_f.forward(x);
}

Tensor Gpt::logits(const Tensor& tokens) const {
  return ops::linear(hidden_states(tokens), wte.weight);  // tied LM head
}

Tensor Gpt::loss(const Batch& batch) const {
  return loss_from_outputs({logits(batch.tokens)}, batch);
}

Tensor Gpt::loss_from_outputs(const std::vector<Tensor>& outputs, const Batch& batch) const {
  MERAK_CHECK(outputs.size() == 1, "gpt's loss takes 1 output, got ", outputs.size());
  return ops::cross_entropy(outputs[0], batch.targets);
}

std::vector<std::string> Gpt::output_names() const { return {"logits [batch, seq, vocab]"}; }

double Gpt::flops_per_token(int64_t seq) const {
  return 6.0 * double(num_parameters()) +
         6.0 * double(options_.layers) * double(seq) * double(options_.hidden);
}

MERAK_REGISTER_MODEL(gpt, [](const ModelOptions& o) { return std::make_unique<Gpt>(o); });

ExternalName hf_gpt2_name(const std::string& name) {
  static const std::map<std::string, std::string> top = {
      {"wte.weight", "transformer.wte.weight"},
      {"wpe.weight", "transformer.wpe.weight"},
      {"ln_f.weight", "transformer.ln_f.weight"},
      {"ln_f.bias", "transformer.ln_f.bias"},
  };
  if (auto it = top.find(name); it != top.end()) return {it->second, false};
  // blocks.<i>.<module>.<weight|bias>
  static const std::regex block(R"(blocks\.(\d+)\.(ln_1|ln_2|attn\.qkv|attn\.proj|mlp\.fc|mlp\.proj)\.(weight|bias))");
  static const std::map<std::string, std::string> modules = {
      {"ln_1", "ln_1"},           {"ln_2", "ln_2"},         {"attn.qkv", "attn.c_attn"},
      {"attn.proj", "attn.c_proj"}, {"mlp.fc", "mlp.c_fc"}, {"mlp.proj", "mlp.c_proj"},
  };
  std::smatch m;
  if (!std::regex_match(name, m, block)) return {};
  const std::string module = m[2], kind = m[3];
  const bool linear = module != "ln_1" && module != "ln_2";
  return {"transformer.h." + std::string(m[1]) + "." + modules.at(module) + "." + kind,
          linear && kind == "weight"};
}

}  // namespace merak::models
