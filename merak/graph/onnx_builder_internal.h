// The importer's working state: what is known about every ONNX value (its shape and dtype, its
// data when it is a constant, the Merak graph value it maps to) and the Merak graph being built.
// Converters (onnx_ops.cc) read values and emit registry ops through it; every emitted node runs
// the registry's shape inference, so an op the registry would reject fails at import.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"
#include "merak/ops/attrs.h"
#include "merak/ops/registry.h"

namespace merak::graph::onnx_detail {

// A node the importer has no mapping for (as opposed to an invalid one).
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Value {
  ops::TensorMeta meta;
  Tensor constant;         // defined when the value is known at import time
  std::string name;        // the Merak graph value it stands for (empty: constant not emitted)
  bool parameter = false;  // a trainable initializer
  std::string transposed_of;  // set: a permute of that parameter, emitted where first used
};

class Builder {
 public:
  // `used` holds every value name some node or the graph output reads; the constants' buffers
  // may hold `max_constant_bytes` together.
  // `external`: where the weights in external data lie, by ONNX initializer name; `copied`:
  // initializers that Identity nodes may copy into parameters of their own (see Identity in
  // onnx_ops.cc), whose bytes must stay for them.
  Builder(Graph& graph, std::set<std::string> used, int64_t max_constant_bytes, uint64_t seed,
          std::map<std::string, ExternalData> external, std::set<std::string> copied);

  // --- values ---
  void add_input(const std::string& name, const ops::TensorMeta& meta);
  // A trainable initializer whose data is written when a node first uses it; the graph takes
  // over the TensorProto's raw bytes then (no copy) unless an Identity may still copy them.
  void add_parameter(const std::string& name, onnx::TensorProto* data, const ops::TensorMeta& meta);
  // `name` becomes a parameter of its own holding `of`'s data (see Identity in onnx_ops.cc).
  void copy_parameter(const std::string& name, const std::string& of);
  // `name` holds parameter `of`'s values transposed (an exporter folded the transpose of a tied
  // weight into a copy): it becomes a permute of `of`, emitted where it is first used (as an
  // export without folding has it), so that the two train as the one weight they are.
  void add_transposed_parameter(const std::string& name, const std::string& of,
                                const ops::TensorMeta& meta);
  void set_constant(const std::string& name, const Tensor& value);
  // `name` stands for the same graph value as `of`.
  void set_alias(const std::string& name, const std::string& of);

  bool known(const std::string& name) const {
    return values_.count(name) > 0 || aliases_.count(name) > 0;
  }
  const Value& at(const std::string& name) const;  // throws naming an undefined value
  bool is_constant(const std::string& name) const;
  bool is_used(const std::string& name) const { return used_.count(name) > 0; }

  // The graph value for an ONNX value; a constant or parameter becomes an initializer the first
  // time a node needs it.
  std::string use(const std::string& name);
  // A new constant initializer (e.g. the `false` that Not compares with).
  std::string add_constant(const Tensor& value);

  // --- nodes ---
  // Starts an ONNX node: emitted nodes take its name and module path.
  void begin_node(const onnx::NodeProto& node);
  // Emits registry op `op` on graph values `inputs` ("" = absent optional input), defining the
  // ONNX values `outputs`. Runs the registry's inference; returns the output metas.
  std::vector<ops::TensorMeta> emit(const std::string& op, const std::vector<std::string>& inputs,
                                    const ops::Attrs& attrs,
                                    const std::vector<std::string>& outputs);
  // A fresh value name for an intermediate of a multi-node mapping.
  std::string temp();

  // Lists ONNX value `name` as a graph output. Outputs must be node outputs named as in the
  // file, so one that is an alias or a constant gets a reshape node (to its own shape) named
  // after it.
  void add_output(const std::string& name);

  // --- results ---
  const std::map<std::string, ops::TensorMeta>& metas() const { return metas_; }
  const std::map<std::string, Tensor>& constants() const { return emitted_constants_; }
  Graph& graph() { return graph_; }
  uint64_t seed() const { return seed_; }  // ImportOptions::seed

 private:
  Value& define(const std::string& name);
  const std::string& resolve(const std::string& name) const;  // follows an alias
  std::vector<ops::TensorMeta> emit_node(const std::string& op,
                                         const std::vector<std::string>& inputs,
                                         const ops::Attrs& attrs,
                                         const std::vector<std::string>& outputs);
  void write_initializer(const std::string& graph_name, const Value& v, bool trainable);

  Graph& graph_;
  std::set<std::string> used_;
  std::map<std::string, Value> values_;
  std::map<std::string, std::string> aliases_;                      // ONNX name -> ONNX name
  std::map<std::string, onnx::TensorProto*> parameter_data_;        // by graph name
  std::set<std::string> written_;                                   // initializers written
  std::set<std::string> node_outputs_;                              // by graph name
  std::map<std::string, ops::TensorMeta> metas_;                    // by graph name
  std::map<std::string, Tensor> emitted_constants_;                 // by graph name
  const int64_t max_constant_bytes_;
  const uint64_t seed_;
  const std::map<std::string, ExternalData> external_;               // by ONNX name
  const std::set<std::string> copied_;                               // by ONNX name
  int64_t constant_bytes_ = 0;                 // of the buffers below
  std::set<const Storage*> constant_buffers_;  // views of one buffer count once
  std::string node_name_, module_path_;
  int emitted_in_node_ = 0;
  int64_t temp_count_ = 0;
};

// The module a PyTorch export's node came from: "/blocks.0/attn/qkv/MatMul" -> "blocks.0.attn.qkv".
std::string module_path_of(const std::string& node_name);

}  // namespace merak::graph::onnx_detail
