// The data a config describes, served as rows of each step's global batch: every rank of every
// layout (one process included) draws from this one source, so the global batch is the same for
// every layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "merak/data/dataset.h"
#include "models/model.h"

namespace merak::train {

// Which data a source serves: training's, or the validation data evaluation reads (data.valid,
// or the held-out tail of data.files when data.valid_split is set).
enum class Split { Train, Valid };

// Datasets as opened for one source, kept for the next that reads the same files (training and
// validation from one data.valid_split, each a part of it): each file is opened, its index
// checked or its text tokenized, once. Keyed by what was opened.
using OpenedData = std::map<std::string, std::shared_ptr<const data::TokenDataset>>;

class BatchSource {
 public:
  // Opens the data; data too small for one batch, or (validation) for eval.batches of them,
  // throws config::ConfigError naming the keys. Every batch read checks its token ids against
  // model.vocab: one outside it throws merak::Error naming the file and byte (step 0's batch is
  // read here, so a mismatch usually shows at once). Validation batches are drawn as training's
  // are, from their own data.
  // `opened`: datasets to reuse and keep (see OpenedData); none: opened for this source alone.
  explicit BatchSource(const config::Config& config, Split split = Split::Train,
                       OpenedData* opened = nullptr);
  ~BatchSource();

  // Rows [r0, r1) of global batch `step` (0-based), one of the step's equal micro-batches.
  models::Batch batch(int64_t step, int64_t r0, int64_t r1) const;
  // The same rows as graph inputs by name (tokens, targets, segment_ids, attention_mask,
  // mlm_targets, nsp_labels, mlm_weight): only `names`, each of which must be a field of the
  // family's batch.
  std::map<std::string, Tensor> inputs(int64_t step, int64_t r0, int64_t r1,
                                       const std::vector<std::string>& names) const;

 private:
  std::unique_ptr<data::TokenDataset> data_;
  std::unique_ptr<data::LmSampler> lm_;
  std::unique_ptr<data::BertSampler> bert_;
  // batch(), leaving BERT's mlm_weight undefined unless asked for.
  models::Batch read(int64_t step, int64_t r0, int64_t r1, bool mlm_weight) const;
  // BERT: the predicted tokens of the last global batch asked (its step), as every
  // micro-batch of a step weighs its masked-LM loss by them.
  mutable std::mutex predicted_mutex_;
  mutable int64_t predicted_step_ = -1, predicted_ = 0;
};

}  // namespace merak::train
