// Merak's side of the logits comparison with PyTorch: a GPT of the given shape with the weights
// of a safetensors file (Merak's names or GPT-2's, read as model.init_from reads them), its
// logits for the tokens of another file.
// Usage: gpt_logits WEIGHTS TOKENS OUT LAYERS HIDDEN HEADS MAX_SEQ VOCAB
//   TOKENS holds "tokens" (i64 [B, T]); OUT gets "logits" (f32 [B, T, VOCAB]).
#include <cstdio>
#include <optional>
#include <string>

#include "merak/autograd/grad_mode.h"
#include "merak/checkpoint/safetensors.h"
#include "models/gpt.h"
#include "models/weights_file.h"

int main(int argc, char** argv) {
  using namespace merak;
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: gpt_logits WEIGHTS TOKENS OUT LAYERS HIDDEN HEADS MAX_SEQ VOCAB\n");
    return 2;
  }
  try {
    models::ModelOptions o;
    o.family = "gpt";
    o.layers = std::stoll(argv[4]), o.hidden = std::stoll(argv[5]), o.heads = std::stoll(argv[6]);
    o.max_seq = std::stoll(argv[7]), o.vocab = std::stoll(argv[8]);
    o.dropout = 0;
    auto model = models::make_model(o);
    model->materialize(1);
    const models::WeightsFile weights(argv[1]);
    autograd::NoGradGuard no_grad;
    for (const auto& [name, p] : model->named_parameters()) {
      const std::optional<Tensor> w = weights.read(name);
      if (!w || w->shape() != p.shape()) {
        std::fprintf(stderr, "gpt_logits: %s: '%s' missing or of another shape\n", argv[1],
                     name.c_str());
        return 2;
      }
      p.copy_(*w);
    }
    Tensor tokens;
    for (auto& [name, t] : checkpoint::load_safetensors(argv[2]))
      if (name == "tokens") tokens = t;
    if (!tokens.defined()) {
      std::fprintf(stderr, "gpt_logits: %s has no 'tokens'\n", argv[2]);
      return 2;
    }
    const auto& gpt = dynamic_cast<const models::Gpt&>(*model);
    checkpoint::save_safetensors(argv[3], {{"logits", gpt.logits(tokens)}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
