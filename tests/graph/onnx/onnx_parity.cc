// C++ side of the ONNX import test. For the exports onnx_export.py wrote into DIR:
//  1. imports each one with its inputs' run-time shapes bound, runs it with the graph Executor
//     and compares every output with PyTorch's (max abs difference <= 1e-4);
//  2. trains the imported gpt17 five AdamW steps next to Merak's own GPT holding the same
//     weights (loaded by name from the export's weights file): each step's loss must agree
//     within 1e-4, and the loss must fall.
// Usage: onnx_parity DIR. Exit code 0 when every check holds.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "merak/autograd/engine.h"
#include "merak/autograd/grad_mode.h"
#include "merak/checkpoint/safetensors.h"
#include "merak/graph/executor.h"
#include "merak/graph/onnx_import.h"
#include "merak/ops/functional.h"
#include "merak/optim/adamw.h"
#include "models/model.h"

namespace {

using merak::Tensor;
using Named = std::vector<std::pair<std::string, Tensor>>;
namespace g = merak::graph;

constexpr double kLogitsTolerance = 1e-4;
constexpr double kLossTolerance = 1e-4;
int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

std::map<std::string, Tensor> load_map(const std::string& path) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : merak::checkpoint::load_safetensors(path)) out[name] = t;
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(x[i]) - y[i]));
  return worst;
}

g::Model import_with_inputs(const std::string& dir, const std::string& name,
                            std::map<std::string, Tensor>& inputs,
                            std::map<std::string, Tensor>& expected) {
  g::ImportOptions options;
  for (auto& [key, t] : load_map(dir + "/" + name + "_io.safetensors")) {
    if (key.rfind("out:", 0) == 0) {
      expected[key.substr(4)] = t;
    } else {
      inputs[key] = t;
      options.input_shapes[key] = t.shape();
    }
  }
  return g::import_onnx(dir + "/" + name + ".onnx", options);
}

std::string op_histogram(const g::Model& m) {
  std::map<std::string, int> count;
  for (const auto& n : m.graph().nodes()) ++count[n.op()];
  std::string s;
  for (const auto& [op, k] : count) s += (s.empty() ? "" : " ") + op + "x" + std::to_string(k);
  return s;
}

// The exports' layer norms, GELUs and attentions, causal or under a key padding mask
// (decomposed at opset 13), all fused: one registry op each, none of their primitive parts left.
// A GELU whose input is a linear joins it as linear_gelu.
void check_fused(const std::string& name, const g::Model& model, int norms, int gelus,
                 int sdpas) {
  std::map<std::string, int> count;
  for (const auto& n : model.graph().nodes()) ++count[n.op()];
  bool leftovers = false;
  for (const char* op : {"mean", "pow", "sqrt", "erf", "where"})
    leftovers = leftovers || count.count(op);
  if (sdpas > 0)
    for (const char* op : {"softmax", "masked_fill"}) leftovers = leftovers || count.count(op);
  const int gelu_ops = count["gelu"] + count["linear_gelu"];
  check(count["layer_norm"] == norms && gelu_ops == gelus && count["sdpa"] == sdpas && !leftovers,
        name + ": fused into " + std::to_string(norms) + " layer_norm, " + std::to_string(gelus) +
            " gelu or linear_gelu, " + std::to_string(sdpas) + " sdpa, no primitive leftovers");
}

// Import, run, compare every output with PyTorch's.
void check_logits(const std::string& dir, const std::string& name) {
  std::map<std::string, Tensor> inputs, expected;
  const g::Model model = import_with_inputs(dir, name, inputs, expected);
  std::printf("%s: %d nodes (%s)\n", name.c_str(), model.graph().nodes_size(),
              op_histogram(model).c_str());
  const bool gpt = name.rfind("gpt", 0) == 0;
  check_fused(name, model, gpt ? 5 : 6, gpt ? 2 : 3, 2);
  g::Executor ex(model, 0);
  merak::autograd::NoGradGuard no_grad;
  const std::vector<Tensor> outs = ex.run(inputs);
  check(outs.size() == size_t(model.graph().outputs_size()), name + ": one tensor per output");
  for (int i = 0; i < model.graph().outputs_size() && size_t(i) < outs.size(); ++i) {
    const std::string& out = model.graph().outputs(i).name();
    const Tensor& want = expected.at(out);
    const bool same_shape = outs[size_t(i)].shape() == want.shape();
    const double diff = same_shape ? max_abs_diff(outs[size_t(i)], want) : INFINITY;
    char line[256];
    std::snprintf(line, sizeof line, "%s: %s %s max |merak - torch| = %.3g (tolerance %g)",
                  name.c_str(), out.c_str(), merak::shape_str(want.shape()).c_str(), diff,
                  kLogitsTolerance);
    check(diff <= kLogitsTolerance, line);
  }
}

// The imported GPT and Merak's GPT, same weights, same AdamW, five steps.
void check_training(const std::string& dir) {
  std::map<std::string, Tensor> inputs, expected;
  const g::Model model = import_with_inputs(dir, "gpt17", inputs, expected);
  g::Executor imported(model, 0);
  const auto weights = load_map(dir + "/gpt17_weights.safetensors");
  const auto batch = load_map(dir + "/gpt_train.safetensors");

  merak::models::ModelOptions o;
  o.family = "gpt";
  o.layers = 2, o.hidden = 64, o.heads = 4, o.max_seq = 32, o.vocab = 96, o.dropout = 0;
  auto ours = merak::models::make_model(o);
  ours->materialize(1);
  for (const auto& [pname, p] : ours->named_parameters()) {
    MERAK_CHECK(weights.count(pname), "export has no weight '", pname, "'");
    merak::autograd::NoGradGuard no_grad;
    p.copy_(weights.at(pname));
  }

  // The importer keeps parameter names: the imported trainable set is exactly our GPT's, and
  // each starts from the exported weight.
  std::set<std::string> ours_names, imported_names;
  for (const auto& [pname, p] : ours->named_parameters()) ours_names.insert(pname);
  bool same_start = true;
  for (const auto& [pname, p] : imported.parameters()) {
    imported_names.insert(pname);
    same_start = same_start && weights.count(pname) && max_abs_diff(p, weights.at(pname)) == 0;
  }
  check(ours_names == imported_names,
        "gpt17: imported trainable parameters are Merak GPT's, by name (" +
            std::to_string(imported_names.size()) + ")");
  check(same_start, "gpt17: imported parameters hold the exported weights");

  merak::optim::AdamWOptions ao;
  ao.lr = 3e-3;
  merak::optim::AdamW opt_ours(merak::optim::make_params(ours->named_parameters()), ao);
  merak::optim::AdamW opt_imported(merak::optim::make_params(imported.parameters()), ao);
  merak::models::Batch b;
  b.tokens = batch.at("tokens");
  b.targets = batch.at("targets");
  const int64_t vocab = o.vocab;
  std::vector<double> ours_loss, imported_loss;
  for (int step = 0; step < 5; ++step) {
    opt_ours.zero_grad();
    opt_imported.zero_grad();
    const Tensor l1 = ours->loss(b);
    merak::autograd::backward(l1);
    const Tensor logits = imported.run({{"tokens", b.tokens}})[0];
    const Tensor l2 = merak::ops::cross_entropy(merak::ops::reshape(logits, {-1, vocab}),
                                                merak::ops::reshape(b.targets, {-1}));
    merak::autograd::backward(l2);
    ours_loss.push_back(l1.item());
    imported_loss.push_back(l2.item());
    opt_ours.step(ao.lr);
    opt_imported.step(ao.lr);
    char line[160];
    std::snprintf(line, sizeof line,
                  "gpt17 train step %d: loss merak GPT %.6f, imported %.6f, "
                  "|diff| %.2g",
                  step, ours_loss.back(), imported_loss.back(),
                  std::fabs(ours_loss.back() - imported_loss.back()));
    check(std::fabs(ours_loss.back() - imported_loss.back()) <= kLossTolerance, line);
  }
  check(imported_loss.back() < imported_loss.front() - 0.05,
        "gpt17: the imported model's loss falls");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: onnx_parity DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    for (const char* name : {"gpt13", "gpt17", "bert13", "bert17"}) check_logits(dir, name);
    check_training(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_parity: %s\n", e.what());
    return 1;
  }
  std::printf("onnx_parity: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
