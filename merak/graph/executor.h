// Runs a graph with real tensors through the op registry, so forward is recorded by autograd and
// backward comes from the same op definitions as eager mode: imported ONNX models train too.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"

namespace merak::graph {

class Executor {
 public:
  // Materialises the initializers on `device`: their data when the graph carries it, else drawn
  // from Philox keyed by (seed, name) exactly as nn::Module::materialize draws them, so a traced
  // graph starts from the same weights as the eager model. Trainable ones require gradients.
  Executor(const Model& model, uint64_t seed, Device device = Device::cpu());

  // Runs every node in order; inputs by graph input name (missing or mis-shaped ones are errors
  // naming the input). Returns the graph outputs. Intermediate values are released after their
  // last use.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

  // Runs several independent input sets (the parts of a split micro-batch) interleaved: each
  // part runs up to and including its next tp_all_reduce, then the next part does, so that
  // under a deferring ops::TpScope one part's all-reduce is in flight while another computes. A step
  // whose input is still being written (merak/core/pending.h) waits for it first, and every
  // pending value is finished before returning. `resume(k)` is called whenever part k is about
  // to run (to set its dropout stream). Returns each part's outputs.
  std::vector<std::vector<Tensor>> run_parts(
      const std::vector<std::map<std::string, Tensor>>& parts,
      const std::function<void(size_t)>& resume);

  // Training (the default) or evaluation: in evaluation dropout passes its input through.
  void set_training(bool training) { training_ = training; }

  // Trainable initializers by name, for the optimizer.
  std::vector<std::pair<std::string, Tensor>> parameters() const;
  // Mixed precision: every trainable floating-point initializer is replaced by a `dtype` copy
  // (a new leaf, same name) that the graph computes with from now on. Returns the replaced
  // originals, as parameters() listed them: the master weights.
  std::vector<std::pair<std::string, Tensor>> cast_parameters(DType dtype);
  const Tensor& value(const std::string& initializer) const;

 private:
  Model model_;
  std::map<std::string, Tensor> initializers_;
  // (private members are the implementation's choice)
  struct Plan;                        // the nodes resolved to ops and value slots (executor.cc)
  std::shared_ptr<const Plan> plan_;
  std::vector<Tensor> bind(const std::map<std::string, Tensor>& inputs) const;
  void run_step(size_t index, std::vector<Tensor>& values) const;
  std::vector<Tensor> results(const std::vector<Tensor>& values) const;
  Device device_;
  bool training_ = true;
};

}  // namespace merak::graph
