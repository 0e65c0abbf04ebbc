// Nodes of the backward graph. Each op call that involves a tensor requiring gradients becomes a
// node holding only what its backward formula reads; nodes are numbered in creation order, so
// walking them in decreasing number is a valid reverse topological order (the tape).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/ops/registry.h"

namespace merak::autograd {

struct Node;

// Where one input's gradient goes: output `input_nr` of `node`'s forward (null: nowhere).
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
};

struct Node : GradFn, std::enable_shared_from_this<Node> {
  uint64_t sequence = 0;     // creation order; leaf accumulators use 0 and run last
  int num_outputs = 1;       // how many forward outputs send gradients here
  std::vector<Edge> next;    // one per forward input

  // Gradients of the forward outputs in, gradients of the forward inputs out (one per edge).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) = 0;
  virtual void release() {}  // drop saved tensors once the node has run
  virtual std::string name() const = 0;
};

// Backward of one registry op call.
struct OpNode final : Node {
  const ops::OpDef* op = nullptr;
  ops::Attrs attrs;
  std::vector<Tensor> inputs;   // saved data, or Meta stand-ins with the right shape
  std::vector<Tensor> outputs;
  std::vector<bool> needs_input_grad;
  std::vector<Tensor> carry;  // BackwardCtx::carry between the halves of a split backward
  bool released = false;

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override;
  // apply for the inputs `which` selects only (one entry per input); the others get none.
  std::vector<Tensor> apply_for(std::vector<Tensor> grad_outputs, const std::vector<bool>& which);
  void release() override;
  std::string name() const override { return op->name; }
};

// Adds the incoming gradient into a leaf tensor's .grad.
struct AccumulateGrad final : Node {
  std::shared_ptr<TensorImpl> leaf;
  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override;
  std::string name() const override { return "accumulate_grad(" + leaf->name + ")"; }
};

uint64_t next_sequence();
// The edge a tensor's gradient flows into (empty when it does not require gradients).
Edge gradient_edge(const Tensor& t);
// Whether a tensor takes part in autograd: a leaf that requires grad, or an op result on a tape.
inline bool needs_grad(const Tensor& t) {
  return t.defined() && (t.requires_grad() || t.grad_fn() != nullptr);
}

}  // namespace merak::autograd
