#include "merak/train/model_graph.h"

#include "merak/graph/convert.h"
#include "merak/graph/onnx_import.h"
#include "merak/graph/summary.h"
#include "merak/graph/tracer.h"
#include "merak/train/plan.h"
#include "models/model.h"

namespace merak::train {
namespace {

std::string field_list(const std::vector<graph::TraceInput>& fields) {
  std::string out;
  for (const graph::TraceInput& f : fields) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

// model.onnx imported at [micro_batch, seq], its inputs bound by name to the family's batch
// fields, with the family's loss appended.
graph::Model imported_graph(const config::Config& c, int64_t micro_batch) {
  const std::string& file = c.model.onnx;
  const std::string where = c.path + ": key 'model.onnx': " + file + ": ";
  const std::string& family = c.model.family;
  const std::vector<graph::TraceInput> fields =
      graph::batch_inputs(family, micro_batch, c.train.seq_len);
  graph::ImportOptions options;
  options.shape_for = [&](const std::string& input) -> std::optional<Shape> {
    for (const graph::TraceInput& f : fields)
      if (f.name == input) return f.shape;
    throw graph::ImportError("input '" + input + "' is not a field of " + family +
                             "'s batch (" + field_list(fields) +
                             "): export the network with its inputs named after them");
  };
  graph::Model net;
  try {
    net = graph::import_onnx(file, options);
  } catch (const graph::ImportError& e) {
    throw SetupError(where + e.what());
  }
  for (const graph::ValueInfo& in : net.graph().inputs())
    for (const graph::TraceInput& f : fields)
      if (f.name == in.name() && graph::from_proto(in.type().dtype()) != f.dtype)
        throw SetupError(where + "input '" + in.name() + "' is " +
                         dtype_name(graph::from_proto(in.type().dtype())) + "; " + family +
                         "'s batch feeds it as " + dtype_name(f.dtype));
  // Both families' first output is the logits over the vocabulary: its last dim is the width
  // the data's token ids must stay below.
  if (net.graph().outputs_size() > 0) {
    const graph::ValueInfo& logits = net.graph().outputs(0);
    const int dims = logits.type().dims_size();
    const int64_t width = dims > 0 ? logits.type().dims(dims - 1).size() : 0;
    if (width != c.model.vocab)
      throw SetupError(c.path + ": key 'model.vocab': " + std::to_string(c.model.vocab) +
                       ", but the output '" + logits.name() + "' of " + file + " has " +
                       std::to_string(width) + " classes (set model.vocab: " +
                       std::to_string(width) + ")");
  }
  const auto model = models::make_model(c.model);  // on Meta: its loss only
  try {
    return graph::append_family_loss(net, *model, micro_batch, c.train.seq_len);
  } catch (const Error& e) {
    throw SetupError(where + e.what());
  }
}

}  // namespace

graph::Model model_graph(const config::Config& c, int64_t micro_batch) {
  if (!c.model.onnx.empty()) return imported_graph(c, micro_batch);
  auto model = models::make_model(c.model);
  return graph::trace_model(*model, micro_batch, c.train.seq_len, c.train.seed);
}

ModelFacts model_facts(const config::Config& c) {
  ModelFacts f;
  if (c.model.onnx.empty()) {
    const auto model = models::make_model(c.model);  // on Meta: no memory
    for (const auto& [name, value] : model->named_parameters()) f.parameter_names.push_back(name);
    f.parameters = model->num_parameters();
    f.flops_per_token = model->flops_per_token(c.train.seq_len);
    return f;
  }
  const graph::Model m = imported_graph(c, 1);
  for (const graph::Initializer& i : m.graph().initializers())
    if (i.trainable()) f.parameter_names.push_back(i.name());
  const graph::Summary s = graph::summarize(m);
  f.parameters = s.parameters;
  f.flops_per_token = s.flops_per_token();
  return f;
}

}  // namespace merak::train
