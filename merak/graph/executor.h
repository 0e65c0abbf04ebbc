// Runs a graph with real tensors through the op registry, so forward is recorded by autograd and
// backward comes from the same op definitions as eager mode: imported ONNX models train too.
#pragma once

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

  // Trainable initializers by name, for the optimizer.
  std::vector<std::pair<std::string, Tensor>> parameters() const;
  const Tensor& value(const std::string& initializer) const;

 private:
  Model model_;
  std::map<std::string, Tensor> initializers_;
  // (private members are the implementation's choice)
  struct Plan;                        // the nodes resolved to ops and value slots (executor.cc)
  std::shared_ptr<const Plan> plan_;
  Device device_;
};

}  // namespace merak::graph
