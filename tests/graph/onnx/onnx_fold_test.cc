// Constant folding runs the op registry's kernels: an observer records which registry ops a
// fold calls, folded values equal the registry op's on the same tensors bit for bit, and ONNX's
// own conventions (integer division, negative indices, Slice's clamping) survive the mapping.
// Every arithmetic, comparison, logical op and reduction folds through a registry op.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "merak/graph/onnx_fold_internal.h"
#include "merak/ops/dispatch.h"
#include "tests/graph/onnx/onnx_test_models.h"

using namespace merak;
using namespace onnx_test;

namespace {

// Records the registry ops called while it lives.
class OpLog : public ops::OpObserver {
 public:
  OpLog() { ops::add_observer(this); }
  ~OpLog() override { ops::remove_observer(this); }
  void on_op(const ops::OpDef& op, const std::vector<Tensor>&, std::vector<Tensor>&,
             const ops::Attrs&) override {
    names.push_back(op.name);
  }
  std::vector<std::string> names;
};

onnx::NodeProto onnx_node(const std::string& op) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name("n_" + op);
  n.add_output("y");
  return n;
}

Tensor i64(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor bools(const std::vector<bool>& v, const Shape& s) {
  Tensor t = Tensor::empty(s, DType::Bool);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

// Folds `n` on `in` into its one output; `ran` gets the registry ops that ran.
Tensor fold(const onnx::NodeProto& n, const std::vector<Tensor>& in,
            std::vector<std::string>* ran = nullptr) {
  OpLog log;
  std::vector<Tensor> out;
  REQUIRE(graph::onnx_detail::fold_node(n, in, out));
  REQUIRE(out.size() == 1);
  if (ran) *ran = log.names;
  return out[0];
}

bool ran_op(const std::vector<std::string>& ran, const std::string& op) {
  return std::find(ran.begin(), ran.end(), op) != ran.end();
}

std::vector<int> bool_values(const Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.data<bool>()[i] ? 1 : 0);
  return v;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), size_t(x.nbytes())) == 0;
}

std::string fold_error(const onnx::NodeProto& n, const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  try {
    graph::onnx_detail::fold_node(n, in, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("onnx fold: a Constant of no elements in typed fields is an empty tensor") {
  // Found by the fuzzer (tools/fuzz/findings/onnx_import-crash-814a77f7.onnx): the values were
  // copied from the empty int64_data, whose data() is null (UBSan: null passed to memcpy).
  for (const int type : {kInt64, kFloat, int(onnx::TensorProto::INT32)}) {
    onnx::NodeProto n = onnx_node("Constant");
    auto* value = n.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    value->mutable_t()->set_data_type(type);
    value->mutable_t()->add_dims(0);
    value->mutable_t()->add_dims(3);
    const Tensor t = fold(n, {});
    CHECK(t.shape() == Shape{0, 3});
    CHECK(t.numel() == 0);
  }
}

TEST_CASE("onnx fold: int64 arithmetic runs the registry's add, mul and div") {
  std::vector<std::string> ran;
  Tensor y = fold(onnx_node("Add"), {i64({1, 2, 3, 4, 5, 6}, {2, 3}), i64({10}, {1})}, &ran);
  CHECK(ran == std::vector<std::string>{"add"});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{11, 12, 13, 14, 15, 16});

  // Wraps around as two's complement, never undefined overflow.
  const int64_t big = std::numeric_limits<int64_t>::max();
  y = fold(onnx_node("Mul"), {i64({big, 3}, {2}), i64({2}, {})}, &ran);
  CHECK(ran == std::vector<std::string>{"mul"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{-2, 6});

  // Integer division truncates toward zero, as the old folder (and C++) did.
  y = fold(onnx_node("Div"), {i64({-7, 7, 9}, {3}), i64({2, -2, 3}, {3})}, &ran);
  CHECK(ran == std::vector<std::string>{"div"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{-3, -3, 3});
  CHECK_THAT(fold_error(onnx_node("Div"), {i64({1, 2}, {2}), i64({1, 0}, {2})}),
             Catch::Contains("division by zero"));
  const int64_t min = std::numeric_limits<int64_t>::min();
  CHECK_THAT(fold_error(onnx_node("Div"), {i64({min}, {1}), i64({-1}, {})}),
             Catch::Contains("by -1"));

  y = fold(onnx_node("Neg"), {i64({5, -3}, {2})}, &ran);
  CHECK(ran == std::vector<std::string>{"neg"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{-5, 3});
}

TEST_CASE("onnx fold: Where, Gather, Concat, Slice and Cast on int64 and float constants") {
  std::vector<std::string> ran;
  // Where on int64 values with a broadcast scalar.
  Tensor y = fold(onnx_node("Where"),
                  {bools({true, false, true}, {3}), i64({1, 2, 3}, {3}), i64({-1}, {})}, &ran);
  CHECK(ran == std::vector<std::string>{"where"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{1, -1, 3});

  // Gather counts negative indices from the end; a scalar index drops the axis.
  y = fold(onnx_node("Gather"), {i64({10, 20, 30, 40}, {4}), i64({-1, 0, 1}, {3})}, &ran);
  CHECK((ran_op(ran, "slice") && ran_op(ran, "concat")));
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{40, 10, 20});
  onnx::NodeProto g = onnx_node("Gather");
  set_int(g, "axis", 1);
  y = fold(g, {f32({1, 2, 3, 4, 5, 6}, {2, 3}), i64({-1}, {})});
  CHECK(y.shape() == Shape{2});
  CHECK(y.to_vector<float>() == std::vector<float>{3, 6});
  CHECK_THAT(fold_error(onnx_node("Gather"), {i64({1, 2}, {2}), i64({2}, {})}),
             Catch::Contains("out of range"));

  onnx::NodeProto c = onnx_node("Concat");
  set_int(c, "axis", 0);
  y = fold(c, {i64({1}, {1}), i64({2, 3}, {2})}, &ran);
  CHECK(ran == std::vector<std::string>{"concat"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});

  // Slice clamps ONNX's bounds (INT64_MAX: to the end; negative: from the end).
  const int64_t end = std::numeric_limits<int64_t>::max();
  y = fold(onnx_node("Slice"), {i64({0, 1, 2, 3, 4}, {5}), i64({-3}, {1}), i64({end}, {1})}, &ran);
  CHECK(ran == std::vector<std::string>{"slice"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  // A step of 2 over the rows of a [4, 2] float matrix.
  y = fold(onnx_node("Slice"), {f32({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}), i64({0}, {1}),
                                i64({end}, {1}), i64({0}, {1}), i64({2}, {1})});
  CHECK(y.shape() == Shape{2, 2});
  CHECK(y.to_vector<float>() == std::vector<float>{0, 1, 4, 5});

  // float -> int64 truncates toward zero, NaN -> 0.
  onnx::NodeProto cast = onnx_node("Cast");
  set_int(cast, "to", kInt64);
  y = fold(cast, {f32({1.7f, -2.5f, NAN}, {3})}, &ran);
  CHECK(ran == std::vector<std::string>{"cast"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{1, -2, 0});
}

TEST_CASE("onnx fold: a folded float equals the registry op's result bit for bit") {
  const Tensor x = f32({-3.1f, -0.7f, 0.001f, 0.5f, 1.3f, 2.9f, 7.25f}, {7});
  for (const auto& [onnx_op, op] : std::vector<std::pair<std::string, std::string>>{
           {"Tanh", "tanh"}, {"Erf", "erf"}, {"Exp", "exp"}, {"Relu", "relu"}}) {
    std::vector<std::string> ran;
    const Tensor y = fold(onnx_node(onnx_op), {x}, &ran);
    CHECK(ran == std::vector<std::string>{op});
    CHECK(same_bits(y, ops::call(op, {x})[0]));
  }
  const Tensor b = f32({3, 7, 0.1f, -9, 11, 13, 0.3f}, {7});
  CHECK(same_bits(fold(onnx_node("Div"), {x, b}), ops::call("div", {x, b})[0]));
  // Pow with a one-element exponent is the registry's pow with that exponent.
  CHECK(same_bits(fold(onnx_node("Pow"), {b, f32({3}, {})}),
                  ops::call("pow", {b}, ops::Attrs().set("exponent", 3.0))[0]));
}

TEST_CASE("onnx fold: Range, Trilu, Not and reductions run registry ops") {
  std::vector<std::string> ran;
  Tensor y = fold(onnx_node("Range"), {i64({2}, {}), i64({11}, {}), i64({3}, {})}, &ran);
  CHECK(ran_op(ran, "arange"));
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{2, 5, 8});
  y = fold(onnx_node("Range"), {f32({1}, {}), f32({0}, {}), f32({-0.25f}, {})});
  CHECK(y.to_vector<float>() == std::vector<float>{1, 0.75f, 0.5f, 0.25f});

  y = fold(onnx_node("Trilu"), {i64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}), i64({1}, {})}, &ran);
  CHECK(ran == std::vector<std::string>{"where"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 3, 0, 0, 6, 0, 0, 0});

  y = fold(onnx_node("Not"), {bools({true, false}, {2})}, &ran);
  CHECK(ran == std::vector<std::string>{"eq"});
  CHECK(bool_values(y) == std::vector<int>{0, 1});

  onnx::NodeProto sum = onnx_node("ReduceSum");
  set_int(sum, "keepdims", 0);
  y = fold(sum, {i64({1, 2, 3, 4, 5, 6}, {2, 3}), i64({-1}, {1})}, &ran);
  CHECK(ran_op(ran, "sum"));
  CHECK(y.shape() == Shape{2});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{6, 15});
}

TEST_CASE("onnx fold: comparisons run lt, gt, le, ge: integers exact, NaN false, broadcasting") {
  // 2^60 and 2^60 + 1 are one double: a comparison through double would call them equal.
  const int64_t big = int64_t(1) << 60;
  const Tensor a = i64({1, 5, 3, big}, {4}), b = i64({3, 3, 3, big + 1}, {4});
  for (const auto& [onnx_op, op, want] :
       std::vector<std::tuple<std::string, std::string, std::vector<int>>>{
           {"Less", "lt", {1, 0, 0, 1}},
           {"Greater", "gt", {0, 1, 0, 0}},
           {"LessOrEqual", "le", {1, 0, 1, 1}},
           {"GreaterOrEqual", "ge", {0, 1, 1, 0}}}) {
    INFO(onnx_op);
    std::vector<std::string> ran;
    const Tensor y = fold(onnx_node(onnx_op), {a, b}, &ran);
    CHECK(ran == std::vector<std::string>{op});
    CHECK(y.dtype() == DType::Bool);
    CHECK(bool_values(y) == want);
  }
  // A [2, 1] column against a [3] row; NaN compares false either way.
  std::vector<std::string> ran;
  Tensor y = fold(onnx_node("Less"), {f32({1, NAN}, {2, 1}), f32({0, 1, 2}, {3})}, &ran);
  CHECK(ran == std::vector<std::string>{"lt"});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(bool_values(y) == std::vector<int>{0, 0, 1, 0, 0, 0});
  y = fold(onnx_node("GreaterOrEqual"), {f32({NAN, 2}, {2}), f32({NAN, 2}, {2})});
  CHECK(bool_values(y) == std::vector<int>{0, 1});
  CHECK_THAT(fold_error(onnx_node("Less"), {i64({1}, {1}), f32({1}, {1})}),
             Catch::Contains("i64"));
}

TEST_CASE("onnx fold: And, Or, Xor run the registry's logical ops on bools") {
  const Tensor a = bools({true, true, false, false}, {2, 2}), b = bools({true, false}, {2});
  for (const auto& [onnx_op, op, want] :
       std::vector<std::tuple<std::string, std::string, std::vector<int>>>{
           {"And", "logical_and", {1, 0, 0, 0}},
           {"Or", "logical_or", {1, 1, 1, 0}},
           {"Xor", "logical_xor", {0, 1, 1, 0}}}) {
    INFO(onnx_op);
    std::vector<std::string> ran;
    const Tensor y = fold(onnx_node(onnx_op), {a, b}, &ran);
    CHECK(ran == std::vector<std::string>{op});
    CHECK(y.shape() == Shape{2, 2});
    CHECK(bool_values(y) == want);
  }
  CHECK_THAT(fold_error(onnx_node("And"), {i64({1}, {1}), i64({1}, {1})}),
             Catch::Contains("must be bool"));
}

TEST_CASE("onnx fold: n-ary Max and Min chain maximum and minimum; NaN wins, integers exact") {
  std::vector<std::string> ran;
  const int64_t big = int64_t(1) << 60;
  // Three inputs with broadcasting: [2, 2], [2] and a scalar.
  Tensor y = fold(onnx_node("Max"), {i64({1, 9, big + 1, -4}, {2, 2}), i64({big, 2}, {2}),
                                     i64({0}, {})},
                  &ran);
  CHECK(ran == std::vector<std::string>{"maximum", "maximum"});
  CHECK(y.shape() == Shape{2, 2});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{big, 9, big + 1, 2});
  y = fold(onnx_node("Min"), {i64({1, 9, big + 1, -4}, {2, 2}), i64({big, 2}, {2})}, &ran);
  CHECK(ran == std::vector<std::string>{"minimum"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{1, 2, big, -4});

  // NaN on either side is the result.
  y = fold(onnx_node("Max"), {f32({NAN, 1, 3}, {3}), f32({0, NAN, -1}, {3})});
  const auto v = y.to_vector<float>();
  CHECK(std::isnan(v[0]));
  CHECK(std::isnan(v[1]));
  CHECK(v[2] == 3);
  y = fold(onnx_node("Min"), {f32({NAN, 1, 3}, {3}), f32({0, NAN, -1}, {3})});
  CHECK(std::isnan(y.to_vector<float>()[0]));
  CHECK(y.to_vector<float>()[2] == -1);

  // One input is itself.
  y = fold(onnx_node("Max"), {i64({4, -4}, {2})}, &ran);
  CHECK(ran.empty());
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{4, -4});
  CHECK_THAT(fold_error(onnx_node("Max"), {i64({1}, {1}), f32({1}, {1})}),
             Catch::Contains("i64"));
}

TEST_CASE("onnx fold: Abs, Sign, Floor and Ceil run their registry ops") {
  std::vector<std::string> ran;
  const int64_t min = std::numeric_limits<int64_t>::min();
  // Integers exactly; |MIN| wraps to MIN (two's complement, never undefined).
  Tensor y = fold(onnx_node("Abs"), {i64({-3, 0, 7, min}, {4})}, &ran);
  CHECK(ran == std::vector<std::string>{"abs"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 7, min});
  y = fold(onnx_node("Abs"), {f32({-2.5f, 0.5f}, {2})});
  CHECK(y.to_vector<float>() == std::vector<float>{2.5f, 0.5f});

  y = fold(onnx_node("Sign"), {i64({-9, 0, 4}, {3})}, &ran);
  CHECK(ran == std::vector<std::string>{"sign"});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 1});
  y = fold(onnx_node("Sign"), {f32({-0.5f, 0, 3, NAN}, {4})});
  const auto s = y.to_vector<float>();
  CHECK((s[0] == -1 && s[1] == 0 && s[2] == 1 && std::isnan(s[3])));

  const Tensor x = f32({-2.5f, -2, -0.5f, 0.5f, 2, 2.5f}, {2, 3});
  y = fold(onnx_node("Floor"), {x}, &ran);
  CHECK(ran == std::vector<std::string>{"floor"});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.to_vector<float>() == std::vector<float>{-3, -2, -1, 0, 2, 2});
  y = fold(onnx_node("Ceil"), {x}, &ran);
  CHECK(ran == std::vector<std::string>{"ceil"});
  CHECK(y.to_vector<float>() == std::vector<float>{-2, -2, -0.0f, 1, 2, 3});
  CHECK_THAT(fold_error(onnx_node("Floor"), {i64({1}, {1})}),
             Catch::Contains("Floor needs a floating input"));
}

TEST_CASE("onnx fold: Pow with a tensor exponent runs pow_tensor, integers through f64") {
  std::vector<std::string> ran;
  // A [2, 1] base against a [3] exponent.
  Tensor y = fold(onnx_node("Pow"), {f32({2, 3}, {2, 1}), f32({0, 1, 2}, {3})}, &ran);
  CHECK(ran == std::vector<std::string>{"pow_tensor"});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.to_vector<float>() == std::vector<float>{1, 2, 4, 1, 3, 9});
  // An i64 base computes in f64 and converts back; the exponent may have another dtype.
  y = fold(onnx_node("Pow"), {i64({2, 3, -2}, {3}), f32({10, 2, 3}, {3})}, &ran);
  CHECK(ran_op(ran, "pow_tensor"));
  CHECK(y.dtype() == DType::I64);
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{1024, 9, -8});
}

TEST_CASE("onnx fold: ReduceProd and ReduceMin run prod and min") {
  std::vector<std::string> ran;
  onnx::NodeProto p = onnx_node("ReduceProd");
  set_int(p, "keepdims", 0);
  Tensor y = fold(p, {i64({1, 2, 3, -4, 5, 6}, {2, 3}), i64({1}, {1})}, &ran);
  CHECK(ran_op(ran, "prod"));
  CHECK(y.dtype() == DType::I64);
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{6, -120});
  // Every axis, kept as 1s.
  y = fold(onnx_node("ReduceProd"), {f32({1.5f, 2, -1, 4}, {2, 2})});
  CHECK(y.shape() == Shape{1, 1});
  CHECK(y.to_vector<float>() == std::vector<float>{-12});
  // An integer product past what f64 holds exactly fails, naming the op.
  const int64_t big = int64_t(1) << 40;
  CHECK_THAT(fold_error(onnx_node("ReduceProd"), {i64({big, big}, {2})}),
             Catch::Contains("ReduceProd of integers leaves double precision"));

  onnx::NodeProto m = onnx_node("ReduceMin");
  set_int(m, "keepdims", 0);
  y = fold(m, {i64({4, -2, 9, 7, 8, 3}, {2, 3}), i64({0}, {1})}, &ran);
  CHECK(ran_op(ran, "min"));
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{4, -2, 3});
  y = fold(m, {f32({4, NAN, 1, 7}, {2, 2}), i64({-1}, {1})});
  CHECK(std::isnan(y.to_vector<float>()[0]));
  CHECK(y.to_vector<float>()[1] == 1);
}

TEST_CASE("onnx fold: structural values stay ONNX-side") {
  std::vector<std::string> ran;
  const Tensor y = fold(onnx_node("Shape"), {f32({1, 2, 3, 4, 5, 6}, {2, 3})}, &ran);
  CHECK(ran.empty());
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{2, 3});
}

TEST_CASE("onnx fold: int64 shape arithmetic through registry ops imports into one reshape") {
  // x [batch, 6] -> [batch, 2, 3], the target computed from Shape(x) by Slice, Div, Concat,
  // a float round trip of Casts and a Where.
  OnnxModel m;
  m.input("x", kFloat, {-1, 6}).output("y", {-1, 2, 3});
  m.ints("two", {1}, {2}).ints("halves", {2}, {1, 2}).ints("zero", {1}, {0});
  m.ints("one", {1}, {1}).ints("minus", {}, {-1});
  m.node("Shape", {"x"}, {"s"});                           // [B, 6]
  m.node("Div", {"s", "halves"}, {"d"});                   // [B, 3]
  m.node("Slice", {"s", "zero", "one"}, {"b"});            // [B]
  m.node("Slice", {"d", "one", "two"}, {"three"});         // [3]
  auto& cat = m.node("Concat", {"b", "two", "three"}, {"t"});  // [B, 2, 3]
  set_int(cat, "axis", 0);
  auto& to_f = m.node("Cast", {"t"}, {"tf"});
  set_int(to_f, "to", kFloat);
  auto& to_i = m.node("Cast", {"tf"}, {"ti"});
  set_int(to_i, "to", kInt64);
  m.node("Equal", {"ti", "t"}, {"same"});
  m.node("Where", {"same", "ti", "minus"}, {"target"});
  m.node("Reshape", {"x", "target"}, {"y"});
  const auto model = import(m, {{"x", {4, 6}}});
  CHECK(op_counts(model) == std::map<std::string, int>{{"reshape", 1}});
  CHECK(model.graph().initializers_size() == 0);
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  const auto out = run(model, {{"x", f32(v, {4, 6})}});
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == Shape{4, 2, 3});
  CHECK(out[0].contiguous().to_vector<float>() == v);
}
