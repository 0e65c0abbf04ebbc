// The partitioner on imported ONNX graphs (PyTorch exports of GPT-2-style and BERT-style models
// at opsets 14 and 17, made by tests/partition/onnx_models.py): the tensor-parallel pass must
// recognise attention and MLP regions from the graph's structure alone, and the plan for tp 2 x
// pp 2 run in one process must give the unsplit graph's outputs and gradients.
//
//   onnx_tp_check DIR     (DIR holds gpt14, gpt17, bert14, bert17 .onnx)
// Exit code 0 when every model passes; each check prints one line.
#include <cmath>
#include <cstdio>
#include <string>

#include "merak/autograd/engine.h"
#include "merak/core/philox.h"
#include "merak/graph/convert.h"
#include "merak/graph/executor.h"
#include "merak/graph/onnx_import.h"
#include "merak/ops/functional.h"
#include "merak/partition/partitioner.h"
#include "merak/partition/simulate.h"

using namespace merak;

namespace {

// Integer inputs get ids in [0, 2) (valid tokens, segments and labels), boolean ones true.
std::map<std::string, Tensor> inputs_for(const graph::Model& m) {
  std::map<std::string, Tensor> in;
  for (const graph::ValueInfo& v : m.graph().inputs()) {
    Shape shape;
    for (const graph::Dim& d : v.type().dims()) shape.push_back(d.size());
    const DType t = graph::from_proto(v.type().dtype());
    Tensor x = Tensor::empty(shape, t);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const uint64_t r = philox_at(9, uint64_t(i))[0];
      if (t == DType::I64) x.data<int64_t>()[i] = int64_t(r % 2);
      else if (t == DType::I32) x.data<int32_t>()[i] = int32_t(r % 2);
      else if (t == DType::Bool) x.data<bool>()[i] = true;
      else x.data<float>()[i] = float(r % 1000) / 1000.0f;
    }
    in[v.name()] = x;
  }
  return in;
}

partition::StepResult unsplit(const graph::Model& m, const std::map<std::string, Tensor>& in) {
  graph::Executor ex(m, 1);
  const std::vector<Tensor> out = ex.run(in);
  std::vector<Tensor> roots, seeds;
  for (const Tensor& o : out) {
    roots.push_back(o);
    seeds.push_back(Tensor::ones(o.shape(), o.dtype()));
  }
  autograd::backward(roots, seeds);
  partition::StepResult r;
  for (double x : ops::cast(out[0].detach(), DType::F64).to_vector<double>()) r.loss += x;
  for (const auto& [name, p] : ex.parameters()) r.grads[name] = p.grad();
  return r;
}

double worst_gradient_error(const partition::StepResult& a, const partition::StepResult& b,
                            std::string* where) {
  double worst = 0;
  for (const auto& [name, g] : b.grads) {
    auto it = a.grads.find(name);
    if (it == a.grads.end()) {
      *where = name + " (missing)";
      return INFINITY;
    }
    const auto x = it->second.to_vector<float>(), y = g.to_vector<float>();
    double scale = 1e-3, diff = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      scale = std::max(scale, std::fabs(double(y[i])));
      diff = std::max(diff, std::fabs(double(x[i]) - double(y[i])));
    }
    if (diff / scale > worst) {
      worst = diff / scale;
      *where = name;
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: onnx_tp_check DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  int failures = 0;
  for (const std::string name : {"gpt14", "gpt17", "bert14", "bert17"}) {
    graph::ImportOptions opt;
    opt.dim_params = {{"batch", 2}, {"seq", 8}};
    const graph::Model m = graph::import_onnx(dir + "/" + name + ".onnx", opt);
    partition::Request req;
    req.pp = 2;
    req.tp = 2;
    req.hardware = partition::load_hardware(partition::find_hardware("cpu-local"));
    req.memory.micro_batches = 2;
    const partition::Result r = partition::run_partition(m, req);
    const auto in = inputs_for(m);
    const partition::StepResult want = unsplit(m, in);
    const partition::StepResult got = partition::run_step(r.plan, in, 1);
    std::string where;
    const double grad_err = worst_gradient_error(got, want, &where);
    const double out_err = std::fabs(got.loss - want.loss) / std::max(1.0, std::fabs(want.loss));
    // Both attention layers and both MLPs (BERT adds its pooler + NSP classifier) are split.
    const bool regions = r.notes.front().find("(2 attention over heads") != std::string::npos;
    const bool ok = regions && out_err <= 1e-5 && grad_err <= 1e-4;
    std::printf("%s %s: %s; outputs off by %.2e, gradients by %.2e (worst %s)\n",
                ok ? "ok  " : "FAIL", name.c_str(), r.notes.front().c_str(), out_err, grad_err,
                where.c_str());
    failures += ok ? 0 : 1;
  }
  return failures == 0 ? 0 : 1;
}
