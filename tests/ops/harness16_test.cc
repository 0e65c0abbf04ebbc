// The host side of the harness's 16-bit CUDA pass (harness16.h), which a machine without a GPU
// can check: tolerances, rounding and comparison, how variants are derived, the skip table.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <set>

#include "merak/ops/dispatch.h"
#include "merak/ops/op_util.h"
#include "tests/ops/harness16.h"

namespace merak::test {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

OpCase case_of(std::vector<Tensor> inputs) {
  OpCase c;
  c.inputs = std::move(inputs);
  return c;
}

}  // namespace

TEST_CASE("harness16: tolerances by output dtype, loosened for long reductions",
          "[ops][harness16]") {
  Tolerance t = half_tolerance(DType::BF16, 1, 1e-5);
  CHECK(t.rtol == 1.6e-2);
  CHECK(t.atol == 1e-2);
  t = half_tolerance(DType::F16, 256, 1e-5);
  CHECK(t.rtol == 2e-3);
  CHECK(t.atol == 1e-3);
  // Four times the work per output element: twice the atol, the same rtol.
  t = half_tolerance(DType::F16, 4 * 256, 1e-5);
  CHECK(t.rtol == 2e-3);
  CHECK(t.atol == Approx(2e-3));
  // Outputs kept in f32 (stat_dtype) at the f32 pass's tolerance; a case's looser one is a floor.
  t = half_tolerance(DType::F32, 1e6, 0);
  CHECK((t.rtol == 1e-5 && t.atol == 1e-5));
  t = half_tolerance(DType::F32, 1, 1e-4);
  CHECK((t.rtol == 1e-4 && t.atol == 1e-4));
  t = half_tolerance(DType::BF16, 1, 5e-2);
  CHECK((t.rtol == 5e-2 && t.atol == 5e-2));
  for (DType d : {DType::I32, DType::I64, DType::Bool}) {
    t = half_tolerance(d, 1e6, 1e-2);
    CHECK((t.rtol == 0 && t.atol == 0));
  }
}

TEST_CASE("harness16: work per output element from the registry's cost", "[ops][harness16]") {
  const auto& reg = ops::Registry::get();
  CHECK(work_per_output(reg.at("add"), {rand_f64({70001}, 1), rand_f64({}, 2)}, {}) == 1);
  CHECK(work_per_output(reg.at("sum"), {rand_f64({3, 2000}, 3)},
                        Attrs().set("dims", std::vector<int64_t>{1})) == 2000);
  CHECK(work_per_output(reg.at("matmul"), {rand_f64({9, 200}, 4), rand_f64({200, 13}, 5)}, {}) ==
        400);
  CHECK(work_per_output(reg.at("sum"), {rand_f64({0, 3}, 6)},
                        Attrs().set("dims", std::vector<int64_t>{0})) >= 0);
  // So a long bf16 sum gets a looser atol than an elementwise op, and the same rtol.
  const Tolerance add = half_tolerance(DType::BF16, 1, 1e-5);
  const Tolerance sum = half_tolerance(DType::BF16, 20000, 1e-4);
  CHECK(sum.atol == Approx(1e-2 * std::sqrt(20000.0 / 256)));
  CHECK(sum.atol > add.atol);
  CHECK(sum.rtol == add.rtol);
}

TEST_CASE("harness16: rounding to 16 bits and the comparison", "[ops][harness16]") {
  // Round to nearest even: ties at 1 + half a unit in the last place go to the even neighbour.
  CHECK(round_to(1 + std::ldexp(1, -8), DType::BF16) == 1);
  CHECK(round_to(1 + 3 * std::ldexp(1, -8), DType::BF16) == 1 + std::ldexp(1, -6));
  CHECK(round_to(1 + std::ldexp(1, -11), DType::F16) == 1);
  CHECK(round_to(1 + 3 * std::ldexp(1, -11), DType::F16) == 1 + std::ldexp(1, -9));
  CHECK(round_to(65519, DType::F16) == 65504);
  CHECK(round_to(65520, DType::F16) == kInf);
  CHECK(round_to(1e5, DType::BF16) == Approx(1e5).epsilon(4e-3));
  CHECK(std::isnan(round_to(kNaN, DType::F16)));
  CHECK(round_to(0.1, DType::F32) == double(0.1f));
  CHECK(round_to(0.1, DType::I64) == 0.1);

  const Tolerance bf16 = half_tolerance(DType::BF16, 1, 1e-5);
  CHECK(within(1.0, 1.0, {}));
  CHECK_FALSE(within(1.0, 1.0 + 1e-12, {}));  // exact
  CHECK(within(2.0 + 0.04, 2.0, bf16));       // 0.04 <= 1e-2 + 1.6e-2 * 2
  CHECK_FALSE(within(2.0 + 0.05, 2.0, bf16));
  CHECK(within(kNaN, kNaN, bf16));
  CHECK_FALSE(within(kNaN, 1.0, bf16));
  CHECK_FALSE(within(1.0, kNaN, bf16));
  CHECK(within(kInf, kInf, bf16));
  CHECK_FALSE(within(-kInf, kInf, bf16));
  CHECK_FALSE(within(65504, kInf, {1e9, 1e9}));  // no tolerance makes a finite value infinite
  CHECK_FALSE(within(kInf, 65504, {1e9, 1e9}));
}

TEST_CASE("harness16: variants round floating inputs, keep integers, bools and stats",
          "[ops][harness16]") {
  const auto& reg = ops::Registry::get();
  const double tie = 1 + std::ldexp(1, -8);  // bf16 rounds it to 1, f16 keeps it
  const Tensor a = make_f64({3}, {tie, -2.5, 0.1});
  const Tensor ids = rand_int({2}, 1, 0, 3);

  for (DType dt : half_dtypes()) {
    INFO(dtype_name(dt));
    const HalfVariant h = derive_half(reg.at("add"), case_of({a, make_f64({}, {3.0})}), dt);
    REQUIRE(h.skip.empty());
    REQUIRE(h.inputs.size() == 2);
    CHECK(h.inputs[0].dtype() == dt);
    CHECK(h.widened[0].dtype() == DType::F32);
    // The GPU's inputs and the CPU's are the same values.
    CHECK(values(h.inputs[0]) == values(h.widened[0]));
    CHECK(values(h.inputs[0])[0] == (dt == DType::BF16 ? 1.0 : tie));
    CHECK(values(h.inputs[0])[2] == round_to(0.1, dt));

    const HalfVariant e = derive_half(reg.at("embedding"), case_of({rand_f64({3, 4}, 2), ids}), dt);
    REQUIRE(e.skip.empty());
    CHECK(e.inputs[0].dtype() == dt);
    CHECK(e.inputs[1].dtype() == DType::I64);
    CHECK(values(e.inputs[1]) == values(ids));
    CHECK(e.widened[1].dtype() == DType::I64);

    const HalfVariant w = derive_half(
        reg.at("where"), case_of({rand_bool({3}, 3), a, make_f64({}, {1.0})}), dt);
    REQUIRE(w.skip.empty());
    CHECK(w.inputs[0].dtype() == DType::Bool);
    CHECK(w.inputs[1].dtype() == dt);
  }

  // layer_norm_grad's mean and rstd, cross_entropy_grad's dloss and lse, sdpa_grad's lse stay
  // f32; the definitions take the variants so (the harness checks every case's on Meta).
  const DType bf16 = DType::BF16;
  const Tensor x = rand_f64({2, 4}, 4), stat = rand_f64({2}, 5, 0.5, 1);
  HalfVariant ln = derive_half(reg.at("layer_norm_grad"),
                               case_of({rand_f64({2, 4}, 6), x, Tensor(), stat, stat}), bf16);
  REQUIRE(ln.skip.empty());
  CHECK(ln.inputs[0].dtype() == bf16);
  CHECK(ln.inputs[1].dtype() == bf16);
  CHECK_FALSE(ln.inputs[2].defined());
  CHECK(ln.inputs[3].dtype() == DType::F32);
  CHECK(ln.inputs[4].dtype() == DType::F32);
  std::vector<ops::TensorMeta> metas;
  for (const Tensor& t : ln.inputs) metas.push_back(ops::TensorMeta::of(t));
  const auto& lng = reg.at("layer_norm_grad");
  CHECK(ops::infer(lng, metas, ops::complete_attrs(lng, {}))[0].dtype == bf16);

  const HalfVariant ce = derive_half(
      reg.at("cross_entropy_grad"),
      case_of({make_f64({}, {0.7}), rand_f64({2, 5}, 7), rand_int({2}, 8, 0, 5), stat}), bf16);
  REQUIRE(ce.skip.empty());
  CHECK(ce.inputs[0].dtype() == DType::F32);
  CHECK(ce.inputs[1].dtype() == bf16);
  CHECK(ce.inputs[2].dtype() == DType::I64);
  CHECK(ce.inputs[3].dtype() == DType::F32);
  const auto& sg = reg.at("sdpa_grad");
  for (size_t i = 0; i < sg.inputs.size(); ++i)
    CHECK(is_stat_input(sg, i) == (i == 6));  // dout, q, k, v, mask?, out, lse
  const auto& concat = reg.at("concat");
  CHECK_FALSE(is_stat_input(concat, 5));  // variadic: the last name repeats
}

TEST_CASE("harness16: the cases without a variant, and why", "[ops][harness16]") {
  const auto& reg = ops::Registry::get();
  const ops::OpDef& add = reg.at("add");
  // f16 overflows at 65504 (1e5 becomes inf); bf16 has f32's range; inputs already infinite
  // are no overflow.
  const OpCase big = case_of({make_f64({2}, {1e5, 1}), make_f64({}, {1.0})});
  CHECK(derive_half(add, big, DType::F16).skip == "an input overflows f16");
  CHECK(derive_half(add, big, DType::BF16).skip.empty());
  CHECK(derive_half(add, case_of({make_f64({2}, {kInf, kNaN}), make_f64({}, {1.0})}), DType::F16)
            .skip.empty());

  OpCase no_f32 = case_of({make_f64({2}, {1, 2}), make_f64({}, {1.0})});
  no_f32.f32_tol = 0;
  CHECK(derive_half(add, no_f32, DType::BF16).skip == "no f32 run: the reference needs f64");

  Tensor h = Tensor::empty({2}, DType::F16);
  CHECK(derive_half(reg.at("neg"), case_of({h}), DType::BF16).skip ==
        "the case picks its own 16-bit dtypes");
  CHECK(derive_half(reg.at("eq"), case_of({rand_int({3}, 1, 0, 2), rand_int({3}, 2, 0, 2)}),
                    DType::F16)
            .skip == "no floating input to round");
  // Nor is an empty input list.
  CHECK(derive_half(reg.at("neg"), case_of({}), DType::BF16).skip == "no floating input to round");
}

TEST_CASE("harness16: the skip table names registered ops, once each, with a reason",
          "[ops][harness16]") {
  std::set<std::string> seen;
  for (const auto& [op, why] : half_skip_table()) {
    INFO(op);
    CHECK(ops::Registry::get().find(op) != nullptr);
    CHECK(seen.insert(op).second);
    CHECK(why.size() > 10);
    CHECK(half_skip_reason(op) == why);
  }
  CHECK(half_skip_reason("add").empty());
  // (That every other registered op has variants of bf16 and f16 cases is the harness's check.)
}

}  // namespace merak::test
