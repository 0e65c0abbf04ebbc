#include "merak/train/batches.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "merak/data/gpt2_tokenizer.h"
#include "merak/data/megatron.h"

namespace merak::train {
namespace {

// Tokens [begin, begin + count) of another dataset (the held-out split and what remains).
class Slice final : public data::TokenDataset {
 public:
  Slice(std::shared_ptr<data::TokenDataset> whole, int64_t begin, int64_t count)
      : whole_(std::move(whole)), begin_(begin), count_(count) {}
  int64_t size() const override { return count_; }
  int64_t vocab_hint() const override { return whole_->vocab_hint(); }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    whole_->read(begin_ + start, count, out);
  }
  std::string place(int64_t i) const override { return whole_->place(begin_ + i); }

 private:
  std::shared_ptr<data::TokenDataset> whole_;
  int64_t begin_, count_;
};

// Text files as one token sequence: bytes, or GPT-2's BPE with <|endoftext|> after each file.
std::unique_ptr<data::TokenDataset> tokenize_text(const config::Config& c,
                                                  const std::vector<std::string>& files) {
  const auto& d = c.data;
  if (d.tokenizer == "byte") return data::tokenize_text_files(files);
  data::Gpt2Tokenizer tokenizer = [&] {
    try {
      return data::Gpt2Tokenizer::load(d.vocab, d.merges);
    } catch (const std::exception& e) {
      throw config::ConfigError(c.path + ": keys 'data.vocab' / 'data.merges': " + e.what());
    }
  }();
  std::vector<int64_t> ids;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw config::ConfigError(c.path + ": key 'data.files': cannot read '" + f + "'");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::vector<int64_t> doc = tokenizer.encode(text);
    ids.insert(ids.end(), doc.begin(), doc.end());
    ids.push_back(tokenizer.eot_id());
  }
  return data::in_memory(std::move(ids), tokenizer.vocab_size(), "the text tokenized by GPT-2's BPE");
}

// Megatron prefixes, each optionally after its blend weight, as Megatron's --data-path takes
// them: [prefix, ...] or [0.3, prefix_a, 0.7, prefix_b].
std::unique_ptr<data::TokenDataset> open_megatron(const config::Config& c,
                                                  const std::vector<std::string>& files) {
  auto number = [](const std::string& s, double* v) {
    char* end = nullptr;
    *v = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size();
  };
  double w = 0;
  if (files.empty() || !number(files[0], &w)) return data::open_megatron(files);
  std::vector<std::string> prefixes;
  std::vector<double> weights;
  for (size_t i = 0; i < files.size(); i += 2) {
    if (i + 1 >= files.size() || !number(files[i], &w) || w <= 0)
      throw config::ConfigError(c.path + ": key 'data.files': weighted Megatron data is "
                                "[weight, prefix, weight, prefix, ...] with weights > 0; entry " +
                                std::to_string(i) + " is '" + files[i] + "'");
    weights.push_back(w);
    prefixes.push_back(files[i + 1]);
  }
  return data::open_megatron(prefixes, weights);
}

std::unique_ptr<data::TokenDataset> open_files(const config::Config& c,
                                               const std::vector<std::string>& files) {
  const auto& d = c.data;
  if (d.source == "text") return tokenize_text(c, files);
  if (d.source == "megatron") return open_megatron(c, files);
  return data::open_shards(files);
}

std::unique_ptr<data::TokenDataset> open_data(const config::Config& c, Split split) {
  const auto& d = c.data;
  if (split == Split::Valid && !d.valid.empty()) return open_files(c, d.valid);
  if (split == Split::Valid && d.valid_split == 0)
    throw config::ConfigError(c.path + ": key 'eval.every': no validation data (data.valid or "
                              "data.valid_split)");
  std::unique_ptr<data::TokenDataset> whole =
      d.source == "generated" ? data::generated_corpus(d.generated_tokens, d.seed)
                              : open_files(c, d.files);
  if (d.valid_split == 0) return whole;
  const std::shared_ptr<data::TokenDataset> all = std::move(whole);
  const int64_t held = int64_t(double(all->size()) * d.valid_split);
  const int64_t kept = all->size() - held;
  return split == Split::Valid ? std::make_unique<Slice>(all, kept, held)
                               : std::make_unique<Slice>(all, 0, kept);
}

}  // namespace

BatchSource::BatchSource(const config::Config& c, Split split) : data_(open_data(c, split)) {
  const auto& t = c.train;
  const bool bert = c.model.family == "bert";
  if (bert && data::BertVocab::kSize > c.model.vocab)
    throw config::ConfigError(c.path + ": key 'model.vocab': " + std::to_string(c.model.vocab) +
                              " is smaller than BERT's vocabulary of bytes and special tokens (" +
                              std::to_string(data::BertVocab::kSize) + ")");
  // The data's largest id is known from one cached scan; only when it is too large does a second
  // scan find the first id out of range, for a message that points at it.
  if (!bert && data_->vocab_hint() > c.model.vocab)
    data::check_ids_below(*data_, c.model.vocab, "model.vocab in " + c.path);
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
