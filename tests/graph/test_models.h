// Small GPT and BERT configurations and batches shared by the graph tests.
#pragma once

#include <algorithm>
#include <vector>

#include "merak/core/philox.h"
#include "models/model.h"

namespace merak::test {

inline models::ModelOptions small_gpt() {
  models::ModelOptions o;
  o.family = "gpt";
  o.layers = 2;
  o.hidden = 32;
  o.heads = 4;
  o.max_seq = 16;
  o.vocab = 64;
  return o;
}

inline models::ModelOptions small_bert() {
  models::ModelOptions o = small_gpt();
  o.family = "bert";
  o.vocab = 70;
  return o;
}

// Deterministic ids in [0, vocab).
inline Tensor ids(const Shape& shape, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::I64);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = int64_t(philox_at(seed, uint64_t(i))[0] % uint64_t(vocab));
  return t;
}

inline models::Batch gpt_batch(int64_t b, int64_t t, int64_t vocab) {
  models::Batch batch;
  batch.tokens = ids({b, t}, vocab, 1);
  batch.targets = ids({b, t}, vocab, 2);
  return batch;
}

// A BERT batch with padding in row 0, a few MLM targets and both NSP labels.
inline models::Batch bert_batch(int64_t b, int64_t t, int64_t vocab) {
  models::Batch batch;
  batch.tokens = ids({b, t}, vocab, 3);
  batch.segment_ids = ids({b, t}, 2, 4);
  batch.attention_mask = Tensor::full({b, t}, 1, DType::Bool);
  for (int64_t j = t - 3; j < t; ++j) batch.attention_mask.data<bool>()[j] = false;
  batch.mlm_targets = Tensor::full({b, t}, -100, DType::I64);
  for (int64_t i = 1; i < b * t; i += 4) batch.mlm_targets.data<int64_t>()[i] = (i * 7) % vocab;
  batch.nsp_labels = ids({b}, 2, 5);
  // The batch is one micro-batch of its global batch: each row weighs its share of the
  // predicted tokens (models::Batch::mlm_weight).
  const std::vector<int64_t> targets = batch.mlm_targets.to_vector<int64_t>();
  auto predicted = [&](int64_t begin, int64_t end) {
    return double(end - begin) -
           double(std::count(targets.begin() + begin, targets.begin() + end, -100));
  };
  batch.mlm_weight = Tensor::empty({b}, DType::F32);
  for (int64_t r = 0; r < b; ++r)
    batch.mlm_weight.data<float>()[r] = float(predicted(r * t, (r + 1) * t) / predicted(0, b * t));
  return batch;
}

}  // namespace merak::test
