#include "merak/train/batches.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ios>
#include <iterator>

#include "merak/data/gpt2_tokenizer.h"
#include "merak/data/megatron.h"

namespace merak::train {
namespace {

// With data.valid_split, data.files (or the generated corpus) are held out at the tail: `part`
// says which part a source reads, or that it reads its data whole.
enum class Part { Whole, Train, Valid };

std::unique_ptr<data::TokenDataset> part_of(const config::Config& c,
                                            std::shared_ptr<const data::TokenDataset> all,
                                            Part part) {
  if (part == Part::Whole) return data::slice(all, 0, all->size());
  const int64_t held = int64_t(double(all->size()) * c.data.valid_split);
  const int64_t kept = all->size() - held;
  return part == Part::Valid ? data::slice(all, kept, held) : data::slice(all, 0, kept);
}

// The dataset opened under `key`, from `opened` when a source before opened it.
template <typename Open>
std::shared_ptr<const data::TokenDataset> once(OpenedData* opened, const std::string& key,
                                               const Open& open) {
  if (opened) {
    auto it = opened->find(key);
    if (it != opened->end()) return it->second;
  }
  std::shared_ptr<const data::TokenDataset> d = open();
  if (opened) (*opened)[key] = d;
  return d;
}

std::string joined(const std::string& kind, const std::vector<std::string>& files) {
  std::string key = kind;
  for (const std::string& f : files) key += "\n" + f;
  return key;
}

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
  // Every id the tokenizer gives must be one of the model's: said before tokenizing.
  if (c.model.vocab < tokenizer.vocab_size())
    throw config::ConfigError(c.path + ": key 'model.vocab': " + std::to_string(c.model.vocab) +
                              " is smaller than the " + std::to_string(tokenizer.vocab_size()) +
                              " ids of GPT-2's tokenizer (data.tokenizer gpt2; GPT-2 pads its "
                              "vocabulary to 50304)");
  std::vector<int64_t> ids;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw Error(f + ": cannot read");  // open_files names the key
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::vector<int64_t> doc = tokenizer.encode(text, false);  // as plain text
    ids.insert(ids.end(), doc.begin(), doc.end());
    ids.push_back(tokenizer.eot_id());
  }
  return data::in_memory(std::move(ids), tokenizer.vocab_size(), "the text tokenized by GPT-2's BPE");
}

// Megatron prefixes, each optionally after its blend weight, as Megatron's --data-path takes
// them: [prefix, ...] or [0.3, prefix_a, 0.7, prefix_b]. A blend repeats small prefixes, so a
// held-out tail of the blend would hold documents training reads too: each prefix is split on
// its own and the parts are blended.
std::unique_ptr<data::TokenDataset> open_megatron(const config::Config& c,
                                                  const std::string& key,
                                                  const std::vector<std::string>& files,
                                                  Part part, OpenedData* opened) {
  auto number = [](const std::string& s, double* v) {
    char* end = nullptr;
    *v = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size();
  };
  double w = 0;
  if (files.empty() || !number(files[0], &w))
    return part_of(
        c, once(opened, joined("megatron", files), [&] { return data::open_megatron(files); }),
        part);
  std::vector<std::string> prefixes;
  std::vector<double> weights;
  for (size_t i = 0; i < files.size(); i += 2) {
    if (i + 1 >= files.size() || !number(files[i], &w) || w <= 0)
      throw config::ConfigError(c.path + ": key '" + key + "': weighted Megatron data is "
                                "[weight, prefix, weight, prefix, ...] with weights > 0; entry " +
                                std::to_string(i) + " is '" + files[i] + "'");
    weights.push_back(w);
    prefixes.push_back(files[i + 1]);
  }
  std::vector<std::unique_ptr<data::TokenDataset>> sources;
  for (const std::string& prefix : prefixes) {
    sources.push_back(part_of(
        c, once(opened, joined("megatron", {prefix}), [&] { return data::open_megatron(prefix); }),
        part));
    if (part != Part::Whole && sources.back()->size() == 0)
      throw config::ConfigError(
          c.path + ": key 'data.valid_split': the " +
          (part == Part::Valid ? "held-out" : "training") + " part of '" + prefix +
          "' has no tokens (each weighted prefix is split on its own, then blended)");
  }
  return data::blend(std::move(sources), weights, prefixes);
}

// The files of `key` (data.files or data.valid); a file that cannot be opened or read is named
// with the config and the key that lists it.
std::unique_ptr<data::TokenDataset> open_files(const config::Config& c, const std::string& key,
                                               const std::vector<std::string>& files, Part part,
                                               OpenedData* opened) {
  const auto& d = c.data;
  const std::string where = c.path + ": key '" + key + "': ";
  if (d.source != "megatron")  // (Megatron's are prefixes of files)
    for (const std::string& f : files) {
      std::error_code ec;
      if (std::filesystem::is_directory(f, ec))
        throw config::ConfigError(where + f + " is a directory, not a file");
    }
  try {
    if (d.source == "megatron") return open_megatron(c, key, files, part, opened);
    if (d.source == "text")
      return part_of(c, once(opened, joined("text", files), [&] { return tokenize_text(c, files); }),
                     part);
    return part_of(c, once(opened, joined("shards", files), [&] { return data::open_shards(files); }),
                   part);
  } catch (const Error& e) {  // the data's own (it names the file and where)
    throw config::ConfigError(where + e.what());
  } catch (const std::ios_base::failure& e) {  // a read the stream library failed
    throw config::ConfigError(where + "cannot read the files: " + e.what());
  }
}

std::unique_ptr<data::TokenDataset> open_data(const config::Config& c, Split split,
                                              OpenedData* opened) {
  const auto& d = c.data;
  if (split == Split::Valid && !d.valid.empty())
    return open_files(c, "data.valid", d.valid, Part::Whole, opened);
  if (split == Split::Valid && d.valid_split == 0)
    throw config::ConfigError(c.path + ": key 'eval.every': no validation data (data.valid or "
                              "data.valid_split)");
  const Part part = d.valid_split == 0      ? Part::Whole
                    : split == Split::Valid ? Part::Valid
                                            : Part::Train;
  if (d.source == "generated")
    return part_of(c, once(opened, "generated", [&] {
                     return data::generated_corpus(d.generated_tokens, d.seed);
                   }),
                   part);
  return open_files(c, "data.files", d.files, part, opened);
}

// The keys that size a split's data, for messages: "'train.batch' / ... ".
std::string size_keys(const config::Config& c, Split split) {
  const auto& d = c.data;
  std::string keys = "'train.batch' / 'train.seq_len' / ";
  if (split == Split::Valid && !d.valid.empty()) return keys + "'data.valid'";
  if (split == Split::Valid) return keys + "'data.valid_split'";
  keys += d.source == "generated" ? "'data.generated_tokens'" : "'data.files'";
  return d.valid_split > 0 ? keys + " / 'data.valid_split'" : keys;
}

}  // namespace

BatchSource::BatchSource(const config::Config& c, Split split, OpenedData* opened)
    : data_(open_data(c, split, opened)) {
  const auto& t = c.train;
  const bool bert = c.model.family == "bert";
  if (bert && data::BertVocab::kSize > c.model.vocab)
    throw config::ConfigError(c.path + ": key 'model.vocab': " + std::to_string(c.model.vocab) +
                              " is smaller than BERT's vocabulary of bytes and special tokens (" +
                              std::to_string(data::BertVocab::kSize) + ")");
  const std::string what = split == Split::Valid ? "validation" : "training";
  const int64_t need = bert ? data::BertSampler::min_tokens(t.seq_len)
                            : data::LmSampler::min_tokens(t.seq_len, t.batch);
  if (data_->size() < need)
    throw config::ConfigError(c.path + ": keys " + size_keys(c, split) + ": the " + what +
                              " data has " + std::to_string(data_->size()) +
                              " tokens, fewer than the " + std::to_string(need) +
                              " that one batch of " + std::to_string(t.batch) + " x " +
                              std::to_string(t.seq_len) + " needs");
  if (bert)
    bert_ = std::make_unique<data::BertSampler>(*data_, t.seq_len, t.batch, c.data.mlm_probability,
                                                c.model.vocab, c.data.seed);
  else
    lm_ = std::make_unique<data::LmSampler>(*data_, t.seq_len, t.batch, c.data.seed, c.model.vocab,
                                            "model.vocab in " + c.path);
  if (split == Split::Valid) {
    // Each evaluation reads global batches 0 .. eval.batches - 1, which must be distinct windows
    // (past one epoch they repeat); BERT draws rows at random, so it is bounded by its tokens.
    const int64_t fits = lm_ ? lm_->steps_per_epoch()
                             : std::max<int64_t>(1, data_->size() / (t.batch * t.seq_len));
    if (c.eval.batches > fits)
      throw config::ConfigError(c.path + ": key 'eval.batches': " +
                                std::to_string(c.eval.batches) + " batches of " +
                                std::to_string(t.batch) + " x " + std::to_string(t.seq_len) +
                                " are more than the validation data's " +
                                std::to_string(data_->size()) +
                                " tokens hold without reading a window twice: at most " +
                                std::to_string(fits));
  }
  // The samplers check ids as they read (a scan of the files up front would take hours at a
  // trillion tokens). Step 0's rows are drawn once now, so that a vocabulary too small for the
  // data, which nearly always shows in them, stops every rank here, before training.
  batch(0, 0, t.batch);
}

BatchSource::~BatchSource() = default;

models::Batch BatchSource::batch(int64_t step, int64_t r0, int64_t r1) const {
  return read(step, r0, r1, /*mlm_weight=*/true);
}

models::Batch BatchSource::read(int64_t step, int64_t r0, int64_t r1, bool mlm_weight) const {
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
    if (!mlm_weight) return b;
    // The weights of models::Batch::mlm_weight: without them a micro-batch with fewer
    // predicted tokens would weigh more of each, and the loss would change with the layout.
    int64_t n_global;
    {
      std::lock_guard<std::mutex> lock(predicted_mutex_);
      if (predicted_step_ != step) {
        predicted_ = bert_->predicted(step);
        predicted_step_ = step;
      }
      n_global = predicted_;
    }
    const int64_t rows = r1 - r0, seq = bb.mlm_targets.size(1);
    const double per_token = n_global > 0 ? double(bert_->batch_size()) / double(rows) /
                                                double(n_global)
                                          : 0.0;
    b.mlm_weight = Tensor::empty({rows}, DType::F32);
    const int64_t* targets = bb.mlm_targets.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r)
      b.mlm_weight.data<float>()[r] =
          float(double(data::BertSampler::count_predicted(targets + r * seq, seq)) * per_token);
  }
  return b;
}

std::map<std::string, Tensor> BatchSource::inputs(int64_t step, int64_t r0, int64_t r1,
                                                  const std::vector<std::string>& names) const {
  // The weights cost a pass over the whole global batch (cached a step): only where read.
  const bool weights = std::find(names.begin(), names.end(), "mlm_weight") != names.end();
  const models::Batch b = read(step, r0, r1, weights);
  const std::map<std::string, Tensor> fields = {
      {"tokens", b.tokens},           {"targets", b.targets},
      {"segment_ids", b.segment_ids}, {"attention_mask", b.attention_mask},
      {"mlm_targets", b.mlm_targets}, {"nsp_labels", b.nsp_labels},
      {"mlm_weight", b.mlm_weight},
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
