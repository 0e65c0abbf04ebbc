// Calling an op: validates inputs and attributes, infers output shapes, allocates, runs the
// device's kernel (or builds the view), then tells the observers (autograd, the tracer).
#pragma once

#include <string>
#include <vector>

#include "merak/ops/registry.h"

namespace merak::ops {

std::vector<Tensor> call(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
std::vector<Tensor> call(const std::string& op, const std::vector<Tensor>& inputs,
                         const Attrs& attrs = {});
// For single-output ops.
Tensor call1(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
// Runs a (non-view) op's kernel into existing contiguous outputs of the inferred shapes and
// dtypes, which may alias an input element for element (in-place accumulation). Nothing is
// recorded: for use under no-grad, by autograd itself.
void call_into(const OpDef& op, const std::vector<Tensor>& inputs,
               const std::vector<Tensor>& outputs, const Attrs& attrs = {});

// Output shapes and dtypes without running anything (validates like call()).
std::vector<TensorMeta> infer(const OpDef& op, const std::vector<TensorMeta>& inputs,
                              const Attrs& attrs);
// The op's attributes with schema defaults filled in; throws on unknown, missing or mistyped ones.
Attrs complete_attrs(const OpDef& op, const Attrs& attrs);
OpCost cost(const OpDef& op, const std::vector<TensorMeta>& inputs, const Attrs& attrs);

// Sees every op call after its outputs exist. Autograd records its tape this way; the tracer
// (merak/graph) records graph nodes.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void on_op(const OpDef& op, const std::vector<Tensor>& inputs,
                     std::vector<Tensor>& outputs, const Attrs& attrs) = 0;
};
void add_observer(OpObserver* observer);
void remove_observer(OpObserver* observer);

// The module path op calls come from ("blocks.7.mlp.fc"), for observers that label what they
// record. Modules open a scope in their forward; scopes nest (the innermost wins). Per thread.
const std::string& current_scope();
class ScopeGuard {
 public:
  explicit ScopeGuard(const std::string& path);
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  std::string previous_;
};

}  // namespace merak::ops
