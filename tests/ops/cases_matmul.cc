// Harness cases for matmul and linear, against triple loops in f64.
#include <string>

#include "tests/ops/harness.h"

namespace merak::test {
namespace {

// out[batch..., m, n] = sum_k op(a)[m, k] op(b)[k, n], batch dims broadcast.
Tensor matmul_ref(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const size_t ra = as.size(), rb = bs.size();
  const int64_t M = ta ? as[ra - 1] : as[ra - 2], K = ta ? as[ra - 2] : as[ra - 1];
  const int64_t N = tb ? bs[rb - 2] : bs[rb - 1];
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch);
  const std::vector<double> av = values(a), bv = values(b);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  std::vector<double> out(size_t(numel(out_shape)), 0.0);
  for (int64_t t = 0; t < numel(batch); ++t) {
    const std::vector<int64_t> idx = unravel(t, batch);
    const int64_t a0 = broadcast_source(idx, a_batch) * M * K;
    const int64_t b0 = broadcast_source(idx, b_batch) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = av[size_t(a0 + (ta ? k * M + m : m * K + k))];
          const double y = bv[size_t(b0 + (tb ? n * K + k : k * N + n))];
          s += x * y;
        }
        out[size_t((t * M + m) * N + n)] = s;
      }
  }
  return make_f64(out_shape, out);
}

OpCase matmul_case(std::string label, const Shape& a, const Shape& b, bool ta, bool tb,
                   uint64_t seed, bool check_grad = true) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(a, seed), rand_f64(b, seed + 1)};
  c.attrs = Attrs().set("trans_a", ta).set("trans_b", tb);
  c.reference = [ta, tb](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{matmul_ref(in[0], in[1], ta, tb)};
  };
  c.check_grad = check_grad;
  return c;
}

// y[r, o] = sum_i x[r, i] w[o, i] + bias[o] over the folded leading dims r.
Tensor linear_ref(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t n_out = w.shape()[0], n_in = w.shape()[1];
  const int64_t rows = x.numel() / n_in;
  const std::vector<double> xv = values(x), wv = values(w);
  const std::vector<double> bv = bias.defined() ? values(bias) : std::vector<double>();
  std::vector<double> y(size_t(rows * n_out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n_out; ++o) {
      double s = bias.defined() ? bv[size_t(o)] : 0.0;
      for (int64_t i = 0; i < n_in; ++i) s += xv[size_t(r * n_in + i)] * wv[size_t(o * n_in + i)];
      y[size_t(r * n_out + o)] = s;
    }
  Shape ys = x.shape();
  ys.back() = n_out;
  return make_f64(ys, y);
}

OpCase linear_case(std::string label, const Shape& x, int64_t n_out, bool bias, uint64_t seed,
                   bool check_grad = true) {
  OpCase c;
  c.label = std::move(label);
  const int64_t n_in = x.back();
  c.inputs = {rand_f64(x, seed), rand_f64({n_out, n_in}, seed + 1),
              bias ? rand_f64({n_out}, seed + 2) : Tensor()};
  c.reference = [](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{linear_ref(in[0], in[1], in[2])};
  };
  c.check_grad = check_grad;
  return c;
}

// linear_gelu's outputs: gelu of the linear reference, and the linear reference itself.
OpCase linear_gelu_case(std::string label, const Shape& x, int64_t n_out, bool bias,
                        const std::string& approximate, uint64_t seed, bool check_grad = true) {
  OpCase c = linear_case(std::move(label), x, n_out, bias, seed, check_grad);
  c.attrs = Attrs().set("approximate", approximate);
  c.reference = [](const std::vector<Tensor>& in, const Attrs& a) {
    const Tensor pre = linear_ref(in[0], in[1], in[2]);
    const bool exact = a.has("approximate") && a.s("approximate") == "none";
    const auto gelu = exact ? gelu_erf_ref : gelu_tanh_ref;
    std::vector<double> y = values(pre);
    for (double& v : y) v = gelu(v);
    return std::vector<Tensor>{make_f64(pre.shape(), y), pre};
  };
  return c;
}

}  // namespace

MERAK_OP_CASES(matmul) {
  return {
      matmul_case("2-D", {3, 4}, {4, 5}, false, false, 1),
      matmul_case("trans_a", {4, 3}, {4, 5}, true, false, 3),
      matmul_case("trans_b", {3, 4}, {5, 4}, false, true, 5),
      matmul_case("trans_a and trans_b", {4, 3}, {5, 4}, true, true, 7),
      matmul_case("batched", {2, 3, 4}, {2, 4, 2}, false, false, 9),
      matmul_case("batched, both transposed", {2, 4, 3}, {2, 2, 4}, true, true, 11),
      matmul_case("broadcast batch dims", {2, 1, 3, 4}, {3, 4, 2}, false, false, 13),
      matmul_case("2-D b folds into a's batch", {2, 3, 4}, {4, 5}, false, false, 15),
      matmul_case("2-D transposed b folds into a's batch", {2, 2, 3, 4}, {5, 4}, false, true, 17),
      matmul_case("size-1 batch b folds", {3, 2, 4}, {1, 4, 3}, false, false, 19),
      matmul_case("2-D b, transposed batched a", {2, 4, 3}, {4, 2}, true, false, 21),
      matmul_case("2-D a against batched b", {3, 4}, {2, 4, 2}, false, false, 23),
      matmul_case("2-D a against batched transposed b", {4, 3}, {2, 2, 4}, true, true, 25),
      matmul_case("K = 1, M = 1", {2, 1, 1}, {2, 1, 3}, false, false, 27),
      matmul_case("batch of 4 (one GEMM per thread)", {4, 3, 5}, {4, 5, 2}, false, false, 29),
      // Large enough to split over threads: along N, then along M.
      matmul_case("threaded, N split", {96, 200}, {200, 130}, false, false, 31, false),
      matmul_case("threaded, M split, transposed", {128, 160}, {110, 128}, true, true, 33, false),
      matmul_case("threaded, folded batch", {4, 64, 96}, {120, 96}, false, true, 35, false),
      matmul_case("threaded, batch of 3 in turn", {3, 128, 128}, {3, 128, 130}, false, false, 37,
                  false),
  };
}

MERAK_OP_CASES(linear) {
  return {
      linear_case("2-D with bias", {3, 4}, 5, true, 41),
      linear_case("3-D without bias", {2, 3, 4}, 5, false, 43),
      linear_case("1-D x with bias", {4}, 3, true, 45),
      linear_case("4-D x with bias", {2, 1, 2, 3}, 2, true, 47),
      linear_case("threaded, with bias", {2, 64, 96}, 200, true, 49, false),
  };
}

MERAK_OP_CASES(linear_gelu) {
  std::vector<OpCase> cs;
  for (const std::string mode : {"tanh", "none"}) {
    cs.push_back(linear_gelu_case(mode + ", 2-D with bias", {3, 4}, 5, true, mode, 51));
    cs.push_back(linear_gelu_case(mode + ", 3-D without bias", {2, 3, 4}, 5, false, mode, 53));
    cs.push_back(linear_gelu_case(mode + ", 1-D x with bias", {4}, 3, true, mode, 55));
    // Large enough to split over threads and to take several blocks of the GEMM's epilogue.
    cs.push_back(linear_gelu_case(mode + ", threaded, N split", {2, 64, 96}, 200, true, mode, 57,
                                  false));
    cs.push_back(linear_gelu_case(mode + ", threaded, M split", {300, 64}, 40, true, mode, 59,
                                  false));
  }
  // The default is the tanh form, as for gelu.
  OpCase d = linear_gelu_case("default attribute", {3, 4}, 5, true, "tanh", 61);
  d.attrs = Attrs();
  cs.push_back(d);
  return cs;
}

}  // namespace merak::test
