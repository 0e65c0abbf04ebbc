#include "models/bert.h"

#include "merak/autograd/checkpoint.h"
#include "merak/ops/functional.h"
#include "models/positions.h"

namespace merak::models {

Bert::Bert(const ModelOptions& o)
    : word(add<nn::Embedding>("word", o.vocab, o.hidden, o.init_std)),
      position(add<nn::Embedding>("position", o.max_seq, o.hidden, o.init_std)),
      segment(add<nn::Embedding>("segment", o.type_vocab, o.hidden, o.init_std)),
      emb_ln(add<nn::LayerNorm>("emb_ln", o.hidden, o.ln_eps)),
      layers(add<nn::ModuleList>("layers")),
      mlm_dense(add<nn::Linear>("mlm_dense", o.hidden, o.hidden, true, o.init_std)),
      mlm_ln(add<nn::LayerNorm>("mlm_ln", o.hidden, o.ln_eps)),
      mlm_bias(parameter("mlm_bias", {o.vocab}, nn::Init::zeros())),
      pooler(add<nn::Linear>("pooler", o.hidden, o.hidden, true, o.init_std)),
      nsp(add<nn::Linear>("nsp", o.hidden, 2, true, o.init_std)),
      options_(o),
      drop_(add<nn::Dropout>("drop", o.dropout)) {
  const nn::BlockOptions b = block_options(o, o.init_std);
  for (int64_t i = 0; i < o.layers; ++i) layers.append<nn::PostLnLayer>(b);
}

Tensor Bert::encode(const Batch& batch) const {
  const Tensor& tokens = batch.tokens;
  MERAK_CHECK(tokens.dim() == 2, "bert: tokens must be [batch, seq], got ", tokens.str());
  const int64_t t = tokens.size(1);
  MERAK_CHECK(t <= options_.max_seq, "bert: sequence length ", t, " exceeds model.max_seq ",
              options_.max_seq);
  Tensor x = ops::add(word.forward(tokens), position.forward(positions(tokens)));
  x = ops::add(x, segment.forward(batch.segment_ids));
  x = drop_.forward(emb_ln.forward(x));
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& layer = layers.at<nn::PostLnLayer>(i);
    if (recompute() && training()) {
      auto segment_fn = [&layer](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{layer.forward(in[0], in[1])};
      };
      x = autograd::checkpoint(segment_fn, {x, batch.attention_mask})[0];
    } else {
      x = layer.forward(x, batch.attention_mask);
    }
  }
  return x;
}

Tensor Bert::mlm_logits(const Tensor& hidden) const {
  const Tensor h = mlm_ln.forward(ops::gelu(mlm_dense.forward(hidden), "none"));
  return ops::linear(h, word.weight, mlm_bias);  // decoder tied to the word embedding
}

Tensor Bert::nsp_logits(const Tensor& hidden) const {
  const Tensor cls = ops::reshape(ops::slice(hidden, 1, 0, 1), {hidden.size(0), hidden.size(2)});
  return nsp.forward(ops::tanh(pooler.forward(cls)));
}

Tensor Bert::loss(const Batch& batch) const {
  const Tensor h = encode(batch);
  return loss_from_outputs({mlm_logits(h), nsp_logits(h)}, batch);
}

Tensor Bert::loss_from_outputs(const std::vector<Tensor>& outputs, const Batch& batch) const {
  MERAK_CHECK(outputs.size() == 2, "bert's loss takes 2 outputs, got ", outputs.size());
  Tensor mlm = ops::cross_entropy(outputs[0], batch.mlm_targets);
  if (batch.mlm_weight.defined())
    mlm = ops::mul(mlm, ops::cast(ops::sum(batch.mlm_weight), mlm.dtype()));
  return ops::add(mlm, ops::cross_entropy(outputs[1], batch.nsp_labels));
}

std::vector<std::string> Bert::output_names() const {
  return {"mlm logits [batch, seq, vocab]", "nsp logits [batch, 2]"};
}

double Bert::flops_per_token(int64_t seq) const {
  return 6.0 * double(num_parameters()) +
         12.0 * double(options_.layers) * double(seq) * double(options_.hidden);
}

MERAK_REGISTER_MODEL(bert, [](const ModelOptions& o) { return std::make_unique<Bert>(o); });

}  // namespace merak::models
