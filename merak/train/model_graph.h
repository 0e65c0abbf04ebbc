// The network a config trains, as a graph, and what the loop reports of it. model.family's
// network is built and traced on Meta tensors; with model.onnx set, that file is imported instead
// and the family's loss appended. One place for both, so the plan, the layout search and the
// trainer see the same graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "merak/graph/graph.pb.h"

namespace merak::train {

// The training graph at `micro_batch` sequences of train.seq_len: the family's batch fields in,
// "loss" out. An ONNX file that cannot be read, or whose inputs, outputs or logits' width do not
// fit the family and model.vocab, throws SetupError naming the file and key 'model.onnx'.
graph::Model model_graph(const config::Config& config, int64_t micro_batch);

struct ModelFacts {
  std::vector<std::string> parameter_names;  // the trainable parameters' global names
  int64_t parameters = 0;                    // their elements
  // Training FLOPs (forward + backward) per token at train.seq_len: the family's formula for a
  // built network (what MFU is quoted against), the op registry's count of the graph for an
  // imported one.
  double flops_per_token = 0;
};
ModelFacts model_facts(const config::Config& config);

}  // namespace merak::train
