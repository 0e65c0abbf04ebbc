#include "merak/train/batches.h"

namespace merak::train {
namespace {

std::unique_ptr<data::TokenDataset> open_data(const config::Config& c) {
  const auto& d = c.data;
  if (d.source == "generated") return data::generated_corpus(d.generated_tokens, d.seed);
  if (d.source == "text") return data::tokenize_text_files(d.files);
  return data::open_shards(d.files);
}

}  // namespace

BatchSource::BatchSource(const config::Config& c) : data_(open_data(c)) {
  const auto& t = c.train;
  const bool bert = c.model.family == "bert";
  const int64_t data_vocab = bert ? data::BertVocab::kSize : data_->vocab_hint();
  if (data_vocab > c.model.vocab)
    throw config::ConfigError(c.path + ": key 'model.vocab': " + std::to_string(c.model.vocab) +
                              " is smaller than the data's vocabulary (" +
                              std::to_string(data_vocab) + ")");
  if (bert)
    bert_ = std::make_unique<data::BertSampler>(*data_, t.seq_len, t.batch, c.data.mlm_probability,
                                                c.model.vocab, c.data.seed);
  else
    lm_ = std::make_unique<data::LmSampler>(*data_, t.seq_len, t.batch, c.data.seed);
}

BatchSource::~BatchSource() = default;

models::Batch BatchSource::batch(int64_t step, int64_t r0, int64_t r1) const {
  models::Batch b;
  if (lm_) {
    data::LmBatch lb = lm_->batch(step, r0, r1);
    b.tokens = lb.tokens;
    b.targets = lb.targets;
  } else {
    data::BertBatch bb = bert_->batch(step, r0, r1);
    b.tokens = bb.tokens;
    b.segment_ids = bb.segment_ids;
    b.attention_mask = bb.attention_mask;
    b.mlm_targets = bb.mlm_targets;
    b.nsp_labels = bb.nsp_labels;
  }
  return b;
}

std::map<std::string, Tensor> BatchSource::inputs(int64_t step, int64_t r0, int64_t r1,
                                                  const std::vector<std::string>& names) const {
  const models::Batch b = batch(step, r0, r1);
  const std::map<std::string, Tensor> fields = {
      {"tokens", b.tokens},           {"targets", b.targets},
      {"segment_ids", b.segment_ids}, {"attention_mask", b.attention_mask},
      {"mlm_targets", b.mlm_targets}, {"nsp_labels", b.nsp_labels},
  };
  std::map<std::string, Tensor> out;
  for (const std::string& name : names) {
    auto it = fields.find(name);
    MERAK_CHECK(it != fields.end() && it->second.defined(), "graph input '", name,
                "' is not a field of this model's batches");
    out[name] = it->second;
  }
  return out;
}

}  // namespace merak::train
