// Tracing: runs a module's forward on Meta tensors (no parameter or activation memory) and
// records every registry op it calls as a graph node, labelled with the module path it came from.
// Parameters become initializers carrying their init spec (no data), so a 20B-parameter model
// traces on a laptop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"
#include "merak/nn/module.h"
#include "models/model.h"

namespace merak::graph {

struct TraceInput {
  std::string name;  // graph input name, e.g. "tokens"
  Shape shape;
  DType dtype = DType::I64;
};

using TraceFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Traces fn(inputs) where fn uses `module`'s parameters. The module is materialised on Meta with
// `seed` first (so its paths and dropout keys are set); `output_names` name fn's results.
Model trace(nn::Module& module, uint64_t seed, const std::vector<TraceInput>& inputs,
            const TraceFn& fn, const std::vector<std::string>& output_names);

// A zoo model's training graph: inputs are the fields of models::Batch that the family reads
// (GPT: tokens, targets; BERT: tokens, segment_ids, attention_mask, mlm_targets at [batch, seq],
// nsp_labels and mlm_weight at [batch]); the single output is "loss".
Model trace_model(models::Model& model, int64_t batch, int64_t seq, uint64_t seed);

// The fields of models::Batch a family reads, as graph inputs at [batch, seq] (those trace_model
// gives its graph); throws naming the family when it has no batch layout.
std::vector<TraceInput> batch_inputs(const std::string& family, int64_t batch, int64_t seq);

// A network made elsewhere (an imported ONNX graph) trained as `family`'s model: its graph
// outputs, in order, are the arguments of the family's loss (models::Model::loss_from_outputs),
// traced onto the end of the graph under the scope "loss"; the labels that loss reads become
// graph inputs. The single output is "loss", as trace_model's. Throws naming the output when the
// outputs are not what the family's loss takes.
Model append_family_loss(const Model& net, const models::Model& family, int64_t batch,
                         int64_t seq);

}  // namespace merak::graph
