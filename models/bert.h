// BERT: word + position + segment embeddings with LayerNorm, post-LN encoder layers
// (bidirectional attention with a key padding mask, exact-GELU MLP), the MLM head (dense, GELU,
// LayerNorm, decoder tied to the word embedding, own bias) and the NSP head (tanh pooler on the
// [CLS] position, 2-way classifier). Loss = MLM cross-entropy + NSP cross-entropy.
#pragma once

#include "merak/nn/layers.h"
#include "merak/nn/transformer.h"
#include "models/model.h"

namespace merak::models {

class Bert : public Model {
 public:
  explicit Bert(const ModelOptions& o);
  Tensor encode(const Batch& batch) const;  // [B, T, C]
  Tensor mlm_logits(const Tensor& hidden) const;
  Tensor nsp_logits(const Tensor& hidden) const;
  Tensor loss(const Batch& batch) const override;
  Tensor loss_from_outputs(const std::vector<Tensor>& outputs, const Batch& batch) const override;
  std::vector<std::string> output_names() const override;
  // 6 N + 12 L T C: bidirectional attention computes every score.
  double flops_per_token(int64_t seq) const override;
  const ModelOptions& options() const override { return options_; }

  nn::Embedding& word;
  nn::Embedding& position;
  nn::Embedding& segment;
  nn::LayerNorm& emb_ln;
  nn::ModuleList& layers;
  nn::Linear& mlm_dense;
  nn::LayerNorm& mlm_ln;
  Tensor& mlm_bias;
  nn::Linear& pooler;
  nn::Linear& nsp;

 private:
  ModelOptions options_;
  nn::Dropout& drop_;
};

}  // namespace merak::models
