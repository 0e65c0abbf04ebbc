// The stat dtype rule (op_util.h's stat_dtype): what layer_norm, cross_entropy and sdpa keep
// for their backwards, and the loss, are f32 for bf16 / f16 inputs and in the input's dtype for
// f32 / f64; their gradient ops take them so and refuse them in the input's 16-bit dtype; and a
// 16-bit model's backward passes them through unchanged. All on Meta: no kernel runs.
#include <catch2/catch.hpp>

#include "merak/autograd/engine.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"

using namespace merak;
namespace F = merak::ops;
using ops::TensorMeta;

namespace {

std::vector<TensorMeta> infer(const std::string& op, const std::vector<TensorMeta>& in,
                              const ops::Attrs& attrs = {}) {
  const ops::OpDef& def = ops::def(op);
  return ops::infer(def, in, ops::complete_attrs(def, attrs));
}

// The dtype the stats should have for inputs of dtype dt.
DType stat_of(DType dt) { return dt == DType::BF16 || dt == DType::F16 ? DType::F32 : dt; }

const TensorMeta kAbsent{{}, DType::F32, false};

}  // namespace

TEST_CASE("stat_dtype: f32 for 16-bit inputs, else the input's dtype", "[ops][stat_dtype]") {
  CHECK(ops::stat_dtype(DType::BF16) == DType::F32);
  CHECK(ops::stat_dtype(DType::F16) == DType::F32);
  CHECK(ops::stat_dtype(DType::F32) == DType::F32);
  CHECK(ops::stat_dtype(DType::F64) == DType::F64);
}

TEST_CASE("layer_norm's mean and rstd are in the stat dtype; layer_norm_grad takes them so",
          "[ops][stat_dtype]") {
  for (DType dt : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    INFO(dtype_name(dt));
    const TensorMeta x{{2, 3, 8}, dt}, w{{8}, dt};
    const auto out = infer("layer_norm", {x, w, w});
    REQUIRE(out.size() == 3);
    CHECK(out[0].dtype == dt);
    CHECK(out[0].shape == x.shape);
    for (int k : {1, 2}) {
      CHECK(out[k].dtype == stat_of(dt));
      CHECK(out[k].shape == Shape{2, 3});
    }
    const auto grads = infer("layer_norm_grad", {x, x, w, out[1], out[2]});
    CHECK(grads[0].dtype == dt);
    CHECK(grads[1].dtype == dt);
    CHECK(grads[2].dtype == dt);
  }
  // Stats in the input's 16-bit dtype (or f32 ones for f64) are refused, naming the input.
  const TensorMeta x{{4, 8}, DType::BF16}, bf16_stat{{4}, DType::BF16}, f32_stat{{4}, DType::F32};
  CHECK_THROWS_WITH(infer("layer_norm_grad", {x, x, kAbsent, bf16_stat, f32_stat}),
                    Catch::Contains("layer_norm_grad") && Catch::Contains("mean bf16[4]") &&
                        Catch::Contains("f32[4]"));
  CHECK_THROWS_WITH(infer("layer_norm_grad", {x, x, kAbsent, f32_stat, bf16_stat}),
                    Catch::Contains("rstd bf16[4]"));
  const TensorMeta x64{{4, 8}, DType::F64};
  CHECK_THROWS_WITH(infer("layer_norm_grad", {x64, x64, kAbsent, f32_stat, f32_stat}),
                    Catch::Contains("mean f32[4]") && Catch::Contains("f64[4]"));
}

TEST_CASE("cross_entropy's loss and lse are in the stat dtype; the gradient in the logits'",
          "[ops][stat_dtype]") {
  for (DType dt : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    INFO(dtype_name(dt));
    const TensorMeta logits{{2, 5, 11}, dt}, targets{{2, 5}, DType::I64};
    const auto out = infer("cross_entropy", {logits, targets});
    REQUIRE(out.size() == 2);
    CHECK(out[0].dtype == stat_of(dt));
    CHECK(out[0].shape.empty());
    CHECK(out[1].dtype == stat_of(dt));
    CHECK(out[1].shape == targets.shape);
    const auto grad = infer("cross_entropy_grad", {out[0], logits, targets, out[1]});
    CHECK(grad[0].dtype == dt);
    CHECK(grad[0].shape == logits.shape);
  }
  const TensorMeta logits{{3, 7}, DType::F16}, targets{{3}, DType::I32};
  const TensorMeta f32_loss{{}, DType::F32}, f32_lse{{3}, DType::F32};
  CHECK_THROWS_WITH(
      infer("cross_entropy_grad", {TensorMeta{{}, DType::F16}, logits, targets, f32_lse}),
      Catch::Contains("cross_entropy_grad") && Catch::Contains("dloss f16") &&
          Catch::Contains("must be a f32 scalar"));
  CHECK_THROWS_WITH(
      infer("cross_entropy_grad", {f32_loss, logits, targets, TensorMeta{{3}, DType::F16}}),
      Catch::Contains("lse f16[3]"));
}

TEST_CASE("sdpa's lse is in the stat dtype; sdpa_grad takes it so", "[ops][stat_dtype]") {
  for (DType dt : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    INFO(dtype_name(dt));
    const TensorMeta q{{2, 3, 5, 8}, dt}, k{{2, 3, 7, 8}, dt}, v{{2, 3, 7, 4}, dt};
    const auto out = infer("sdpa", {q, k, v, kAbsent}, ops::Attrs().set("causal", true));
    REQUIRE(out.size() == 2);
    CHECK(out[0].dtype == dt);
    CHECK(out[0].shape == Shape{2, 3, 5, 4});
    CHECK(out[1].dtype == stat_of(dt));
    CHECK(out[1].shape == Shape{2, 3, 5});
    const auto grads = infer("sdpa_grad", {out[0], q, k, v, kAbsent, out[0], out[1]});
    for (const TensorMeta& g : grads) CHECK(g.dtype == dt);
  }
  const TensorMeta q{{1, 2, 3, 4}, DType::BF16}, o{{1, 2, 3, 4}, DType::BF16};
  CHECK_THROWS_WITH(
      infer("sdpa_grad", {o, q, q, q, kAbsent, o, TensorMeta{{1, 2, 3}, DType::BF16}}),
      Catch::Contains("sdpa_grad") && Catch::Contains("lse must be f32[1, 2, 3]") &&
          Catch::Contains("got bf16"));
}

TEST_CASE("a bf16 model's backward on Meta passes the f32 stats through to the gradient ops",
          "[ops][stat_dtype][autograd]") {
  const Device meta = Device::meta();
  const DType bf16 = DType::BF16;
  const int64_t B = 2, T = 6, H = 2, Dh = 4, C = H * Dh, V = 13;
  auto param = [&](const Shape& s) { return Tensor::empty(s, bf16, meta).set_requires_grad(true); };
  const Tensor wte = param({V, C}), ln_w = param({C}), ln_b = param({C}), w_qkv = param({3 * C, C});
  const Tensor ids = Tensor::empty({B, T}, DType::I64, meta);

  const Tensor x = F::embedding(wte, ids);
  const Tensor h = F::layer_norm(x, ln_w, ln_b);
  const auto qkv = F::split(F::reshape(F::linear(h, w_qkv), {B, T, 3, H, Dh}), {1, 1, 1}, 2);
  auto head = [&](const Tensor& t) {
    return F::permute(F::reshape(t, {B, T, H, Dh}), {0, 2, 1, 3});
  };
  const Tensor att = F::sdpa(head(qkv[0]), head(qkv[1]), head(qkv[2]), Tensor(), true);
  const Tensor y = F::add(x, F::reshape(F::permute(att, {0, 2, 1, 3}), {B, T, C}));
  const Tensor loss = F::cross_entropy(F::linear(y, wte), Tensor::empty({B, T}, DType::I64, meta));
  CHECK(att.dtype() == bf16);
  CHECK(loss.dtype() == DType::F32);

  // The loss's gradient is f32 like the loss; every parameter's gradient is bf16 like it.
  autograd::backward({loss}, {Tensor::empty({}, DType::F32, meta)});
  for (const Tensor& p : {wte, ln_w, ln_b, w_qkv}) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == bf16);
    CHECK(p.grad().shape() == p.shape());
  }
}
