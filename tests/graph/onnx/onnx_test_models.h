// Hand-built ONNX models for the importer's tests: a small builder over onnx::ModelProto, and a
// runner that imports bytes and executes the result.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "merak/autograd/grad_mode.h"
#include "merak/graph/executor.h"
#include "merak/graph/onnx_import.h"

namespace onnx_test {

constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kInt64 = onnx::TensorProto::INT64;
constexpr int kBool = onnx::TensorProto::BOOL;

class OnnxModel {
 public:
  explicit OnnxModel(int opset = 17) {
    model_.set_ir_version(8);
    model_.set_producer_name("onnx_test");
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  // A data input; a negative dim is symbolic, named "batch" for -1 and "seq" for -2.
  OnnxModel& input(const std::string& name, int elem_type, const std::vector<int64_t>& dims) {
    auto* v = model_.mutable_graph()->add_input();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type);
    auto* shape = t->mutable_shape();
    for (int64_t d : dims) {
      if (d >= 0)
        shape->add_dim()->set_dim_value(d);
      else
        shape->add_dim()->set_dim_param(d == -1 ? "batch" : "seq");
    }
    return *this;
  }

  // A graph output of rank dims.size() (the checker wants one); a negative dim is unknown.
  OnnxModel& output(const std::string& name, const std::vector<int64_t>& dims,
                    int elem_type = kFloat) {
    auto* v = model_.mutable_graph()->add_output();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type);
    auto* shape = t->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d >= 0) dim->set_dim_value(d);
    }
    return *this;
  }

  OnnxModel& floats(const std::string& name, const std::vector<int64_t>& dims,
                    const std::vector<float>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(kFloat);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return *this;
  }

  OnnxModel& ints(const std::string& name, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(kInt64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
    return *this;
  }

  // A node named after its first output.
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(outputs.empty() ? op : "n_" + outputs[0]);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }

  onnx::ModelProto& proto() { return model_; }
  std::string bytes() const { return model_.SerializeAsString(); }

 private:
  onnx::ModelProto model_;
};

inline void set_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void set_float(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

inline void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// Imports `m` (named "test.onnx" in messages) with the given input shapes.
inline merak::graph::Model import(const OnnxModel& m,
                                  const std::map<std::string, merak::Shape>& shapes = {}) {
  merak::graph::ImportOptions options;
  options.input_shapes = shapes;
  return merak::graph::import_onnx_bytes(m.bytes(), "test.onnx", options);
}

// Runs an imported model on `inputs` without recording gradients.
inline std::vector<merak::Tensor> run(const merak::graph::Model& model,
                                      const std::map<std::string, merak::Tensor>& inputs) {
  merak::graph::Executor ex(model, 0);
  merak::autograd::NoGradGuard no_grad;
  return ex.run(inputs);
}

inline std::map<std::string, int> op_counts(const merak::graph::Model& m) {
  std::map<std::string, int> out;
  for (const auto& n : m.graph().nodes()) ++out[n.op()];
  return out;
}

}  // namespace onnx_test
