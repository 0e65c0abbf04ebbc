// Harness cases for sdpa and sdpa_grad, against the full Tq x Tk probability matrix in f64.
#include <cmath>
#include <limits>
#include <string>

#include "merak/core/philox.h"
#include "tests/ops/harness.h"

namespace merak::test {
namespace {

// Dropout's factor for probability (b, h, i, j), as the sdpa def states its draw: word i % 4 of
// the Philox block at (((first_row + b) * heads + head_start + h) * ceil(Tq / 4) + i / 4) * Tk +
// j; 1 / (1 - p)
// where that word's uniform is at least p, else 0.
double keep_factor(const Attrs& a, int64_t B_index, int64_t h, int64_t H, int64_t Tq, int64_t Tk,
                   int64_t i, int64_t j) {
  const double p = a.has("dropout") ? a.f("dropout") : 0.0;  // the def's default
  if (p == 0) return 1;
  const int64_t heads = a.i("heads") > 0 ? a.i("heads") : H;
  const int64_t first_row = a.has("first_row") ? a.i("first_row") : 0;
  const int64_t head = (first_row + B_index) * heads + a.i("head_start") + h;
  const uint64_t counter = uint64_t((head * ((Tq + 3) / 4) + i / 4) * Tk + j);
  const auto bits = philox_at(uint64_t(a.i("key")), counter, uint64_t(a.i("stream")));
  return double(uniform01(bits[size_t(i % 4)])) >= p ? 1 / (1 - p) : 0;
}

// Everything a reference needs about one call, with the probabilities of every head.
struct AttentionRef {
  int64_t B, H, Tq, Tk, D, Dv;
  double scale;
  std::vector<double> q, k, v;
  std::vector<double> p;     // [B, H, Tq, Tk]; rows with no visible key are all zero
  std::vector<double> keep;  // [B, H, Tq, Tk]: dropout's factors (all 1 without dropout)
  std::vector<double> out;   // [B, H, Tq, Dv] = (p * keep) v
  std::vector<double> lse;   // [B, H, Tq]; -inf for rows with no visible key

  AttentionRef(const Tensor& tq, const Tensor& tk, const Tensor& tv, const Tensor& mask,
               const Attrs& a) {
    B = tq.shape()[0], H = tq.shape()[1], Tq = tq.shape()[2], D = tq.shape()[3];
    Tk = tk.shape()[2], Dv = tv.shape()[3];
    scale = a.f("scale") > 0 ? a.f("scale") : 1 / std::sqrt(double(D));
    const bool causal = a.b("causal");
    q = values(tq), k = values(tk), v = values(tv);
    const std::vector<double> m = mask.defined() ? values(mask) : std::vector<double>();
    p.assign(size_t(B * H * Tq * Tk), 0.0);
    keep.assign(size_t(B * H * Tq * Tk), 1.0);
    out.assign(size_t(B * H * Tq * Dv), 0.0);
    lse.assign(size_t(B * H * Tq), -std::numeric_limits<double>::infinity());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
          const int64_t row = (b * H + h) * Tq + i;
          std::vector<double> s(static_cast<size_t>(Tk));
          std::vector<bool> ok(static_cast<size_t>(Tk));
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < Tk; ++j) {
            ok[j] = (!causal || j <= i + (Tk - Tq)) && (m.empty() || m[size_t(b * Tk + j)] != 0);
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += q[size_t(row * D + d)] * k[size_t(((b * H + h) * Tk + j) * D + d)];
            s[j] = scale * dot;
            if (ok[j]) mx = std::max(mx, s[j]);
          }
          if (std::isinf(mx)) continue;
          double z = 0;
          for (int64_t j = 0; j < Tk; ++j) z += ok[j] ? std::exp(s[j] - mx) : 0.0;
          lse[size_t(row)] = mx + std::log(z);
          for (int64_t j = 0; j < Tk; ++j) {
            const double pj = ok[j] ? std::exp(s[j] - mx) / z : 0.0;
            const double mj = keep_factor(a, b, h, H, Tq, Tk, i, j);
            p[size_t(row * Tk + j)] = pj;
            keep[size_t(row * Tk + j)] = mj;
            for (int64_t c = 0; c < Dv; ++c)
              out[size_t(row * Dv + c)] += pj * mj * v[size_t(((b * H + h) * Tk + j) * Dv + c)];
          }
        }
  }
};

Tensor attention_mask(const Shape& shape, const std::vector<int>& bits) {
  Tensor t = Tensor::empty(shape, DType::Bool);
  for (size_t i = 0; i < bits.size(); ++i) t.data<bool>()[i] = bits[i] != 0;
  return t;
}

// `with_lse` is false where some row is fully masked: lse is -inf there, which no tolerance
// compares, so only `out` is checked.
OpCase sdpa_case(std::string label, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                 int64_t Dv, Tensor mask, bool causal, double scale, uint64_t seed,
                 bool with_lse = true, bool check_grad = true, const Attrs& dropout = Attrs()) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64({B, H, Tq, D}, seed, -1.5, 1.5),
              rand_f64({B, H, Tk, D}, seed + 1, -1.5, 1.5), rand_f64({B, H, Tk, Dv}, seed + 2),
              mask};
  c.attrs = Attrs(dropout).set("causal", causal).set("scale", scale);
  c.reference = [with_lse](const std::vector<Tensor>& in, const Attrs& a) {
    const AttentionRef r(in[0], in[1], in[2], in[3], a);
    std::vector<Tensor> outs = {make_f64({r.B, r.H, r.Tq, r.Dv}, r.out)};
    if (with_lse) outs.push_back(make_f64({r.B, r.H, r.Tq}, r.lse));
    return outs;
  };
  c.check_grad = check_grad;
  return c;
}

// With M dropout's factors: dV = (P M)^T dO, dP = (dO V^T) M, dS = P * (dP - rowsum(P * dP)),
// dQ = scale dS K, dK = scale dS^T Q: from the full probability matrix, ignoring the out and lse
// inputs.
std::vector<Tensor> sdpa_grad_ref(const std::vector<Tensor>& in, const Attrs& a) {
  const AttentionRef r(in[1], in[2], in[3], in[4], a);
  const std::vector<double> dout = values(in[0]);
  std::vector<double> dq(r.q.size(), 0.0), dk(r.k.size(), 0.0), dv(r.v.size(), 0.0);
  for (int64_t bh = 0; bh < r.B * r.H; ++bh)
    for (int64_t i = 0; i < r.Tq; ++i) {
      const int64_t row = bh * r.Tq + i;
      std::vector<double> dp(size_t(r.Tk), 0.0);
      double rowsum = 0;
      for (int64_t j = 0; j < r.Tk; ++j) {
        const int64_t key = bh * r.Tk + j;
        const double pm = r.p[size_t(row * r.Tk + j)] * r.keep[size_t(row * r.Tk + j)];
        for (int64_t c = 0; c < r.Dv; ++c) {
          dp[j] += dout[size_t(row * r.Dv + c)] * r.v[size_t(key * r.Dv + c)];
          dv[size_t(key * r.Dv + c)] += pm * dout[size_t(row * r.Dv + c)];
        }
        dp[j] *= r.keep[size_t(row * r.Tk + j)];
        rowsum += r.p[size_t(row * r.Tk + j)] * dp[j];
      }
      for (int64_t j = 0; j < r.Tk; ++j) {
        const int64_t key = bh * r.Tk + j;
        const double ds = r.p[size_t(row * r.Tk + j)] * (dp[j] - rowsum);
        for (int64_t d = 0; d < r.D; ++d) {
          dq[size_t(row * r.D + d)] += r.scale * ds * r.k[size_t(key * r.D + d)];
          dk[size_t(key * r.D + d)] += r.scale * ds * r.q[size_t(row * r.D + d)];
        }
      }
    }
  return {make_f64(in[1].shape(), dq), make_f64(in[2].shape(), dk), make_f64(in[3].shape(), dv)};
}

// sdpa_grad's out and lse inputs come from the f64 reference forward.
OpCase sdpa_grad_case(std::string label, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D,
                      int64_t Dv, Tensor mask, bool causal, double scale, uint64_t seed,
                      const Attrs& dropout = Attrs()) {
  OpCase c;
  c.label = std::move(label);
  c.attrs = Attrs(dropout).set("causal", causal).set("scale", scale);
  const Tensor q = rand_f64({B, H, Tq, D}, seed, -1.5, 1.5);
  const Tensor k = rand_f64({B, H, Tk, D}, seed + 1, -1.5, 1.5);
  const Tensor v = rand_f64({B, H, Tk, Dv}, seed + 2);
  const AttentionRef r(q, k, v, mask, c.attrs);
  c.inputs = {rand_f64({B, H, Tq, Dv}, seed + 3), q, k, v, mask,
              make_f64({B, H, Tq, Dv}, r.out), make_f64({B, H, Tq}, r.lse)};
  c.reference = sdpa_grad_ref;
  return c;
}

// Dropout of the probabilities at rate p; heads [start, start + H) of `heads` when heads > 0
// (a tensor-parallel rank's share); sample 0 being row first_row of the global batch.
Attrs prob_dropout(double p, int64_t key, int64_t stream, int64_t start = 0, int64_t heads = 0,
                   int64_t first_row = 0) {
  return Attrs()
      .set("dropout", p)
      .set("key", key)
      .set("stream", stream)
      .set("head_start", start)
      .set("heads", heads)
      .set("first_row", first_row);
}

}  // namespace

MERAK_OP_CASES(sdpa) {
  const Tensor mask_2x4 = attention_mask({2, 4}, {1, 0, 1, 1, 0, 1, 1, 0});
  const Tensor mask_row_off = attention_mask({2, 3}, {1, 1, 0, 0, 0, 0});  // batch 1: no key
  const Tensor mask_2x6 = attention_mask({2, 6}, {0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0});
  return {
      sdpa_case("plain", 1, 2, 3, 4, 5, 5, Tensor(), false, 0, 1),
      sdpa_case("causal, square, explicit scale", 2, 1, 4, 4, 3, 3, Tensor(), true, 0.7, 5),
      sdpa_case("causal, fewer queries than keys", 1, 2, 2, 5, 4, 4, Tensor(), true, 0, 9),
      sdpa_case("causal, more queries than keys (rows fully masked)", 1, 2, 5, 3, 3, 3, Tensor(),
                true, 0, 13, false),
      sdpa_case("key padding mask", 2, 2, 3, 4, 3, 3, mask_2x4, false, 0, 17),
      sdpa_case("mask hides every key of one batch", 2, 1, 2, 3, 4, 4, mask_row_off, false, 0, 21,
                false),
      sdpa_case("mask and causal", 2, 1, 5, 6, 3, 3, mask_2x6, true, 0.5, 25),
      sdpa_case("value dim differs", 1, 2, 3, 4, 3, 2, Tensor(), false, 0, 29),
      sdpa_case("several query blocks, causal", 1, 1, 70, 70, 2, 2, Tensor(), true, 0, 33),
      sdpa_case("threaded, masked", 2, 2, 130, 100, 16, 16, rand_bool({2, 100}, 37, 0.8), false, 0,
                37, true, false),
      sdpa_case("dropout, rows not a multiple of 4", 1, 2, 6, 5, 4, 4, Tensor(), false, 0, 41,
                true, true, prob_dropout(0.3, 7, 2)),
      sdpa_case("dropout, causal, masked, heads 2-3 of 5", 2, 2, 5, 6, 3, 3, mask_2x6, true, 0,
                45, true, true, prob_dropout(0.5, 11, 9, 2, 5)),
      sdpa_case("dropout, several query blocks, threaded", 2, 2, 130, 100, 8, 8, Tensor(), true, 0,
                49, true, false, prob_dropout(0.1, 3, 1)),
      sdpa_case("dropout, samples 6-7 of the batch, heads 2-3 of 5", 2, 2, 5, 6, 3, 3, mask_2x6,
                true, 0, 50, true, true, prob_dropout(0.5, 11, 9, 2, 5, 6)),
  };
}

MERAK_OP_CASES(sdpa_grad) {
  const Tensor mask_2x6 = attention_mask({2, 6}, {0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0});
  return {
      sdpa_grad_case("plain", 1, 2, 3, 4, 5, 5, Tensor(), false, 0, 51),
      sdpa_grad_case("mask, causal, fully masked rows", 2, 1, 7, 6, 3, 2, mask_2x6, true, 0.6, 55),
      sdpa_grad_case("causal, more queries than keys", 1, 1, 6, 4, 3, 3, Tensor(), true, 0, 59),
      sdpa_grad_case("several query blocks", 2, 2, 150, 90, 8, 8, rand_bool({2, 90}, 63, 0.7), true,
                     0, 63),
      sdpa_grad_case("dropout, mask, causal, fully masked rows, heads 1-2 of 3", 2, 2, 7, 6, 3, 2,
                     mask_2x6, true, 0.6, 67, prob_dropout(0.4, 5, 3, 1, 3)),
      sdpa_grad_case("dropout, several query blocks", 1, 2, 150, 90, 8, 8, Tensor(), true, 0, 71,
                     prob_dropout(0.2, 13, 4)),
      sdpa_grad_case("dropout, samples 3-4 of the batch", 2, 2, 7, 6, 3, 2, mask_2x6, true, 0.6,
                     73, prob_dropout(0.4, 5, 3, 0, 0, 3)),
  };
}

}  // namespace merak::test
