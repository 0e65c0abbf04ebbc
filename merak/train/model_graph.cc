#include "merak/train/model_graph.h"

#include "merak/graph/convert.h"
#include "merak/graph/initializer_values.h"
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
// fields, with the family's loss appended; its parameters hold the file's values.
graph::Model imported_graph(const config::Config& c, int64_t micro_batch) {
  const std::string& file = c.model.onnx;
  const std::string key = c.path + ": key 'model.onnx': ";
  const std::string where = key + file + ": ";
  const std::string& family = c.model.family;
  const std::vector<graph::TraceInput> fields =
      graph::batch_inputs(family, micro_batch, c.train.seq_len);
  graph::ImportOptions options;
  options.seed = c.train.seed;  // keys a training-mode export's dropout masks
  options.shape_for = [&](const std::string& input) -> std::optional<Shape> {
    for (const graph::TraceInput& f : fields)
      if (f.name == input) return f.shape;
    throw graph::ImportError(file + ": input '" + input + "' is not a field of " + family +
                             "'s batch (" + field_list(fields) +
                             "): export the network with its inputs named after them");
  };
  graph::Model net;
  try {
    net = graph::import_onnx(file, options);
  } catch (const graph::ImportError& e) {  // it names the file
    // A sequence past the network's position table shows as an index out of range somewhere.
    throw SetupError(key + e.what() + " (its inputs bound to micro-batch " +
                     std::to_string(micro_batch) + " x train.seq_len " +
                     std::to_string(c.train.seq_len) + ")");
  }
  for (const graph::ValueInfo& in : net.graph().inputs())
    for (const graph::TraceInput& f : fields)
      if (f.name == in.name() && graph::from_proto(in.type().dtype()) != f.dtype)
        throw SetupError(where + "input '" + in.name() + "' is " +
                         dtype_name(graph::from_proto(in.type().dtype())) + "; " + family +
                         "'s batch feeds it as " + dtype_name(f.dtype));
  // The optimizer keeps f32 parameters (16-bit compute is train.precision's).
  for (const graph::Initializer& i : net.graph().initializers())
    if (i.trainable() && graph::from_proto(i.type().dtype()) != DType::F32)
      throw SetupError(where + "parameter '" + i.name() + "' is " +
                       dtype_name(graph::from_proto(i.type().dtype())) +
                       ": Merak trains f32 parameters (export the network in float32)");
  for (const graph::ValueInfo& out : net.graph().outputs())
    if (out.name() == "loss")
      throw SetupError(where + "its output 'loss' has the name of the loss the trainer appends "
                               "to the outputs: export them under other names (logits)");
  graph::Model trained;
  const auto model = models::make_model(c.model);  // on Meta: its loss only
  try {
    trained = graph::append_family_loss(net, *model, micro_batch, c.train.seq_len);
  } catch (const Error& e) {
    throw SetupError(where + e.what());
  }
  // Both families' first output is the logits over the vocabulary: its last dim is the width
  // the data's token ids must stay below. (The loss has checked the outputs' shapes.)
  const graph::ValueInfo& logits = net.graph().outputs(0);
  const int64_t width = logits.type().dims(logits.type().dims_size() - 1).size();
  if (width != c.model.vocab)
    throw SetupError(c.path + ": key 'model.vocab': " + std::to_string(c.model.vocab) +
                     ", but the output '" + logits.name() + "' of " + file + " has " +
                     std::to_string(width) + " classes (set model.vocab: " +
                     std::to_string(width) + ")");
  return trained;
}

// Moves the parameters' values out of `m` (into `weights` when given): each is then drawn as
// zeros until the engine loads its piece.
void take_weights(graph::Model& m, std::map<std::string, graph::Initializer>* weights) {
  for (graph::Initializer& i : *m.mutable_graph()->mutable_initializers()) {
    if (!i.trainable() || !graph::has_values(i)) continue;
    if (weights) {
      graph::Initializer& kept = (*weights)[i.name()];
      kept.set_name(i.name());
      *kept.mutable_type() = i.type();
      kept.mutable_data()->swap(*i.mutable_data());  // no copy of the values
      if (i.has_external()) *kept.mutable_external() = i.external();
    }
    i.clear_data();
    i.clear_external();
    i.mutable_init()->set_kind(graph::InitSpec::ZEROS);
  }
}

}  // namespace

graph::Model model_graph(const config::Config& c, int64_t micro_batch) {
  if (c.model.onnx.empty()) {
    auto model = models::make_model(c.model);
    return graph::trace_model(*model, micro_batch, c.train.seq_len, c.train.seed);
  }
  graph::Model m = imported_graph(c, micro_batch);
  take_weights(m, nullptr);
  return m;
}

ModelFacts model_facts(const config::Config& c, int64_t micro_batch, bool weights,
                       graph::Model* graph) {
  ModelFacts f;
  const int64_t size = micro_batch > 0 ? micro_batch : config::model_micro_batch_size(c);
  if (c.model.onnx.empty()) {
    const auto model = models::make_model(c.model);  // on Meta: no memory
    for (const auto& [name, value] : model->named_parameters()) f.parameter_names.push_back(name);
    f.parameters = model->num_parameters();
    f.flops_per_token = model->flops_per_token(c.train.seq_len);
    if (graph) *graph = model_graph(c, size);
    return f;
  }
  graph::Model m = imported_graph(c, size);
  for (const graph::Initializer& i : m.graph().initializers())
    if (i.trainable()) f.parameter_names.push_back(i.name());
  take_weights(m, weights ? &f.weights : nullptr);
  const graph::Summary s = graph::summarize(m);
  f.parameters = s.parameters;
  f.flops_per_token = s.flops_per_token();
  if (graph) *graph = std::move(m);
  return f;
}

}  // namespace merak::train
