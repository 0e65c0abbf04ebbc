// The network a config trains, as a graph, and what the loop needs of it besides the plan.
// model.family's network is built and traced on Meta tensors; with model.onnx set, that file is
// imported instead and the family's loss appended. One place for both, so the plan, the layout
// search and the trainer see the same graph.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"

namespace merak::train {

// The training graph at `micro_batch` sequences of train.seq_len: the family's batch fields in,
// "loss" out. Its parameters carry no values: an imported network's weights would travel in the
// plan once for every rank (past protobuf's 2 GiB for a GPT-2-sized network at dp 4); they are
// ModelFacts::weights instead. A file that cannot be read, or whose inputs, outputs, parameters
// or logits' width do not fit the family and model.vocab, throws SetupError naming the key.
graph::Model model_graph(const config::Config& config, int64_t micro_batch);

struct ModelFacts {
  std::vector<std::string> parameter_names;  // the trainable parameters' global names
  int64_t parameters = 0;                    // their elements
  // Training FLOPs (forward + backward) per token at train.seq_len: the family's formula for a
  // built network (what MFU is quoted against), the op registry's count of the graph for an
  // imported one.
  double flops_per_token = 0;
  // An imported network's starting weights by parameter name, as initializers holding the
  // file's values or where they lie in its external data (graph::initializer_values reads them
  // when a rank loads its pieces); empty for a built network (drawn from train.seed).
  std::map<std::string, graph::Initializer> weights;
};
// The facts, the network imported at `micro_batch` sequences (0: the config's micro-batch size;
// an export of fixed shapes takes only its own). Its weights are read only with `weights`.
// With `graph`, the training graph at that micro-batch size (model_graph's) is stored there too,
// from the same import: a job's rank 0 imports a file once for its plan and its weights.
ModelFacts model_facts(const config::Config& config, int64_t micro_batch = 0,
                       bool weights = true, graph::Model* graph = nullptr);

}  // namespace merak::train
