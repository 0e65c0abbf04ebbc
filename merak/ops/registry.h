// The op registry: every op is defined here once (schema, Meta inference, cost, kernels per
// device, backward formula, sharding rule) and everything else (eager autograd, tracer, graph
// executor, ONNX importer, cost model, TP pass) reads that one definition.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/ops/attrs.h"

namespace merak::ops {

// Shape and dtype of a value: what inference works on. `defined` is false for an absent optional
// input (a linear without bias, attention without a padding mask).
struct TensorMeta {
  Shape shape;
  DType dtype = DType::F32;
  bool defined = true;

  static TensorMeta of(const Tensor& t) {
    return t.defined() ? TensorMeta{t.shape(), t.dtype(), true} : TensorMeta{{}, DType::F32, false};
  }
  int64_t numel() const { return merak::numel(shape); }
  int64_t nbytes() const { return numel() * int64_t(dtype_size(dtype)); }
};

// A matrix product inside an op: `batch` independent products C[m, n] = A[m, k] B[k, n]. The
// cost model prices these by the hardware's GEMM efficiency curve (shape matters: a thin or
// shallow product runs far below peak) and the rest of the op's FLOPs as other kernels.
struct Gemm {
  double batch = 1, m = 0, n = 0, k = 0;
  double flops() const { return 2 * batch * m * n * k; }
};

// A collective an op runs over its tensor-parallel group, for the cost model to price on the
// group's link: `count` of them, each over `members` ranks, the result `elements` long; in the
// op's forward, or in its backward (its gradient's exchange, run only where it is recorded).
// Floating values move at the compute precision; `f32_stats` ones (loss statistics) in f32.
struct Collective {
  enum class Kind { AllReduce, AllGather };
  Kind kind = Kind::AllReduce;
  bool backward = false;
  int64_t members = 1;
  double elements = 0;
  int count = 1;
  bool f32_stats = false;
};

// Predicted work of one call, for the partitioner's cost model.
struct OpCost {
  double fwd_flops = 0;  // forward floating-point operations (GEMMs included)
  double bwd_flops = 0;  // backward (all input gradients)
  double bytes = 0;      // forward bytes read + written
  // The forward's matrix products. Backward runs, for each, the products of dC with the other
  // operand: dA [m, k] = dC B^T (depth n) and dB [k, n] = A^T dC (depth m).
  std::vector<Gemm> gemms;
  std::vector<Collective> collectives;  // tensor-parallel ops: what they exchange
};

// What a backward formula sees. Inputs/outputs the op saves hold data; the others are Meta tensors
// with the right shape and dtype (so formulas can read shapes, never data). Absent optional inputs
// are undefined. A grad_output is undefined when that output got no gradient: treat it as zero.
struct BackwardCtx {
  const std::vector<Tensor>& inputs;
  const std::vector<Tensor>& outputs;
  const std::vector<Tensor>& grad_outputs;
  const Attrs& attrs;
  const std::vector<bool>& needs_input_grad;
  // Shared by the two halves of a split backward (null otherwise): what the first half computed
  // that the second needs too (linear_gelu's GELU gradient) is left here rather than redone.
  std::vector<Tensor>* carry = nullptr;
};

using InferFn = std::function<std::vector<TensorMeta>(const std::vector<TensorMeta>& inputs,
                                                       const Attrs& attrs)>;
using CostFn = std::function<OpCost(const std::vector<TensorMeta>& inputs,
                                    const std::vector<TensorMeta>& outputs, const Attrs& attrs)>;
// Writes `outputs` (allocated, contiguous, shaped by infer) from `inputs` (contiguous unless the
// op sets strided_inputs; undefined where an optional input is absent).
using KernelFn = std::function<void(const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs, const Attrs& attrs)>;
// View ops return views of their inputs instead of running a kernel (works on every device).
using ViewFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs,
                                                 const Attrs& attrs)>;
// Returns one gradient per input (undefined where not needed or not differentiable), computed
// with registry ops so it runs on any device and can itself be traced.
using BackwardFn = std::function<std::vector<Tensor>(const BackwardCtx& ctx)>;

// --- how an op shards over a tensor-parallel group (read by the tensor-parallel pass) ---

// The layout of one value over the group, as in OneFlow's SBP: split along a dim (each rank holds
// a contiguous part), broadcast (each holds all of it) or a partial sum (each holds a summand).
struct Sbp {
  enum class Kind : uint8_t { Split, Broadcast, PartialSum };
  Kind kind = Kind::Broadcast;
  int64_t dim = 0;  // Split only; negative counts from the end

  static Sbp split(int64_t dim) { return {Kind::Split, dim}; }
  static Sbp broadcast() { return {Kind::Broadcast, 0}; }
  static Sbp partial_sum() { return {Kind::PartialSum, 0}; }
  bool is_split() const { return kind == Kind::Split; }
  bool is_partial_sum() const { return kind == Kind::PartialSum; }
};

// One way for every rank to run the op on its pieces: a layout per input (absent optional ones
// included) and per output. A PartialSum input is a bias: the pass adds it once, after the
// outputs' partial sums are reduced, so the op must add it to its result unchanged.
struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
  // The input whose stored values this layout splits (a weight), or -1. Such a layout holds
  // only where that input is a trainable parameter: computed values are never cut in storage.
  int weight = -1;
  // The op each rank runs in this layout when this op cannot run on a piece as it is (a lookup
  // or loss over split classes must know which classes it holds): it gets attribute `start`,
  // the rank's first index along the split dim, and `group`, `size` when it declares them.
  std::string local_op;
};

using SbpFn = std::function<std::vector<SbpSignature>(
    const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs,
    const Attrs& attrs)>;
// Where one rank's piece of a split output dim lies: `local` of the dim's `size` entries, in
// `ranges` equal runs, the first starting at `start` (several when the split interleaves, as
// fused QKV's does).
struct LocalDim {
  int64_t dim = 0, size = 0, local = 0, start = 0, ranges = 1;
};
// The op's attributes on one rank when its output holds only that rank's piece of a dim.
using LocalizeFn = std::function<Attrs(const Attrs& attrs, const LocalDim& piece)>;

struct ShardingRule {
  SbpFn signatures;  // for these shapes and attributes; unset: no value of the op is ever split
  // The split moves onto whichever dim of the other side holds the same elements in row-major
  // order (reshape): no fixed dim to list, and heads or fused QKV parts may regroup.
  bool follows_elements = false;
  // Set when an attribute states a size along a dim (reshape's shape) or where a rank's piece
  // lies (attention's heads, so its dropout draws the unsplit run's masks).
  LocalizeFn localize;
  // The dims it carries a split on are attention heads: the pass calls such a region attention
  // and names heads as the unit tp must divide.
  bool heads = false;
};

struct OpDef {
  std::string name;
  std::string doc;                       // one line: what it computes
  std::vector<std::string> inputs;       // input names; a trailing '?' marks an optional one
  bool variadic = false;                 // last input repeats (concat)
  std::vector<std::string> outputs;      // output names
  std::vector<AttrSpec> attrs;
  InferFn infer;
  CostFn cost;                           // default: one FLOP per output element
  ViewFn view;                           // set for view ops (they have no kernels)
  BackwardFn backward;                   // empty: not differentiable
  bool strided_inputs = false;           // kernel accepts non-contiguous inputs
  // Which values the backward formula reads (bit i = input/output i). Only these are kept alive
  // by autograd; the memory model counts them as activation memory.
  uint32_t saves_inputs = 0;
  uint32_t saves_outputs = 0;
  // Bit i of those; a variadic op (concat, split) may have more than 32 inputs or outputs, which
  // are never saved (and shifting by 32 or more is undefined).
  bool saves_input(size_t i) const { return i < 32 && ((saves_inputs >> i) & 1u); }
  bool saves_output(size_t k) const { return k < 32 && ((saves_outputs >> k) & 1u); }
  int grad_outputs = -1;                 // how many leading outputs carry gradients (-1: all)
  // Backward computes each input's gradient on its own, honouring needs_input_grad (linear's dx
  // and dW are separate products): a zero-bubble pipeline may then ask for the activation
  // gradients first and the parameters' later, at no extra cost.
  bool separable_grads = false;
  ShardingRule sharding;                 // how it splits over a tensor-parallel group
  // Set on ops that draw random numbers (dropout, attention's dropout): whoever runs a traced
  // graph sets their attributes `stream`, `first_row` and `rows` to where the micro-batch draws
  // (rng_place()) and, in evaluation, their rate to 0, or skips them where that makes them the
  // identity.
  struct RandomDraws {
    std::string rate;               // the attribute holding the rate; empty: draws nothing
    bool identity_at_zero = false;  // at rate 0 the op's output is its first input
  };
  RandomDraws random;

  int min_inputs() const;
  bool input_optional(size_t i) const;
};

// Registration happens at static-initialisation time (MERAK_REGISTER_OP in merak/ops/defs,
// MERAK_REGISTER_KERNEL in kernels/<device>): a backend adds kernels without touching the defs.
class Registry {
 public:
  static Registry& get();
  void add(OpDef def);               // throws when the name is taken or the def is incomplete
  const OpDef& at(const std::string& name) const;  // throws naming the op when unknown
  const OpDef* find(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

  void add_kernel(const std::string& op, DeviceType device, KernelFn fn);
  const KernelFn* kernel(const std::string& op, DeviceType device) const;  // null when none

 private:
  std::map<std::string, OpDef> ops_;
  std::map<std::pair<std::string, DeviceType>, KernelFn> kernels_;
};

namespace detail {
struct Registrar {
  explicit Registrar(OpDef (*make)()) { Registry::get().add(make()); }
};
struct KernelRegistrar {
  KernelRegistrar(const char* op, DeviceType device, KernelFn fn) {
    Registry::get().add_kernel(op, device, std::move(fn));
  }
};
}  // namespace detail

// MERAK_REGISTER_OP(add) { OpDef d; d.name = "add"; ...; return d; }
#define MERAK_REGISTER_OP(id)                                               \
  static ::merak::ops::OpDef merak_make_op_##id();                          \
  static ::merak::ops::detail::Registrar merak_registrar_##id(&merak_make_op_##id); \
  static ::merak::ops::OpDef merak_make_op_##id()

// MERAK_REGISTER_KERNEL(add, CPU, [](const auto& in, const auto& out, const Attrs& a) {...});
#define MERAK_REGISTER_KERNEL(id, device, ...)                               \
  static ::merak::ops::detail::KernelRegistrar merak_kernel_##id##_##device( \
      #id, ::merak::DeviceType::device, __VA_ARGS__)

}  // namespace merak::ops
