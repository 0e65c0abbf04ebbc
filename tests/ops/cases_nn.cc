// Harness cases for the neural-network ops (softmax, log_softmax, layer_norm, embedding,
// cross_entropy, dropout and their gradient ops), plus checks the harness cannot express:
// errors, determinism across thread counts, the f32 exp's accuracy.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "kernels/cpu/vec_math.h"
#include "merak/core/parallel.h"
#include "merak/core/philox.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"
#include "tests/ops/harness.h"

namespace merak::test {
namespace {

// Rows of a tensor along `dim`: element i sits at position (i / inner) % len of its row.
struct Along {
  int64_t len, inner;
  Along(const Shape& s, int64_t dim) {
    const int64_t rank = int64_t(s.size());
    dim = dim < 0 ? dim + rank : dim;
    len = s[size_t(dim)];
    inner = 1;
    for (int64_t d = dim + 1; d < rank; ++d) inner *= s[size_t(d)];
  }
  int64_t pos(int64_t i) const { return (i / inner) % len; }
  int64_t first(int64_t i) const { return i - pos(i) * inner; }  // element at position 0
};

// ---- softmax / log_softmax

Tensor softmax_ref(const Tensor& x, int64_t dim, bool log) {
  const std::vector<double> v = values(x);
  const Along a(x.shape(), dim);
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t f = a.first(int64_t(i));
    double m = v[size_t(f)];
    for (int64_t l = 0; l < a.len; ++l) m = std::max(m, v[size_t(f + l * a.inner)]);
    double s = 0;
    for (int64_t l = 0; l < a.len; ++l) s += std::exp(v[size_t(f + l * a.inner)] - m);
    out[i] = log ? v[i] - m - std::log(s) : std::exp(v[i] - m) / s;
  }
  return make_f64(x.shape(), out);
}

OpCase softmax_case(bool log, std::string label, Tensor x, int64_t dim) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {x};
  c.attrs = Attrs().set("dim", dim);
  c.reference = [log, dim](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{softmax_ref(in[0], dim, log)};
  };
  return c;
}

std::vector<OpCase> softmax_cases(bool log) {
  std::vector<OpCase> cs = {
      softmax_case(log, "last dim", rand_f64({3, 5}, 1, -2, 2), -1),
      softmax_case(log, "1-D", rand_f64({7}, 2, -2, 2), 0),
      softmax_case(log, "middle dim", rand_f64({2, 3, 4}, 3, -2, 2), 1),
      softmax_case(log, "dim 0", rand_f64({4, 3}, 4, -2, 2), 0),
      softmax_case(log, "single element rows", rand_f64({4, 1}, 5), -1),
      // Rows longer than the kernels' 32 lanes, with a tail; large offset tests the max shift.
      softmax_case(log, "long rows, offset 60", rand_f64({2, 70}, 6, 58, 62), 1),
  };
  // Forward only: a 2-thread split and every vector path (no FD at this size).
  OpCase big = softmax_case(log, "256x300 forward", rand_f64({256, 300}, 7, -8, 8), -1);
  big.check_grad = false;
  cs.push_back(big);
  OpCase big_mid =
      softmax_case(log, "dim 1 of 8x40x50 forward", rand_f64({8, 40, 50}, 8, -8, 8), 1);
  big_mid.check_grad = false;
  cs.push_back(big_mid);
  return cs;
}

MERAK_OP_CASES(softmax) { return softmax_cases(false); }
MERAK_OP_CASES(log_softmax) { return softmax_cases(true); }

// dx_j = sum_i dy_i * dy_i/dx_j with the softmax Jacobian y_i (delta_ij - y_j), or for
// log_softmax delta_ij - exp(y_j); written as that explicit double sum.
Tensor softmax_grad_ref(const Tensor& dy, const Tensor& y, int64_t dim, bool log) {
  const std::vector<double> g = values(dy), v = values(y);
  const Along a(y.shape(), dim);
  std::vector<double> out(v.size(), 0.0);
  for (size_t j = 0; j < v.size(); ++j) {
    const int64_t f = a.first(int64_t(j));
    for (int64_t l = 0; l < a.len; ++l) {
      const size_t i = size_t(f + l * a.inner);
      const double delta = i == j ? 1 : 0;
      out[j] += log ? g[i] * (delta - std::exp(v[j])) : g[i] * v[i] * (delta - v[j]);
    }
  }
  return make_f64(y.shape(), out);
}

OpCase softmax_grad_case(bool log, std::string label, const Shape& shape, int64_t dim,
                         uint64_t seed) {
  OpCase c;
  c.label = std::move(label);
  // A realistic y: the output of the forward op on random logits.
  const Tensor y = softmax_ref(rand_f64(shape, seed, -2, 2), dim, log);
  c.inputs = {rand_f64(shape, seed + 100), y};
  c.attrs = Attrs().set("dim", dim);
  c.reference = [log, dim](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{softmax_grad_ref(in[0], in[1], dim, log)};
  };
  return c;
}

std::vector<OpCase> softmax_grad_cases(bool log) {
  return {softmax_grad_case(log, "last dim", {3, 5}, -1, 11),
          softmax_grad_case(log, "middle dim", {2, 4, 3}, 1, 12),
          softmax_grad_case(log, "dim 0", {5, 2}, 0, 13),
          softmax_grad_case(log, "long rows", {2, 75}, -1, 14),
          softmax_grad_case(log, "64x200", {64, 200}, -1, 15)};
}

MERAK_OP_CASES(softmax_grad) { return softmax_grad_cases(false); }
MERAK_OP_CASES(log_softmax_grad) { return softmax_grad_cases(true); }

// ---- layer_norm

// y, mean, rstd of x over its last dim (weight/bias may be undefined).
std::vector<Tensor> layer_norm_ref(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const int64_t D = x.shape().back(), rows = x.numel() / D;
  const std::vector<double> v = values(x);
  const std::vector<double> wv = w.defined() ? values(w) : std::vector<double>(D, 1.0);
  const std::vector<double> bv = b.defined() ? values(b) : std::vector<double>(D, 0.0);
  std::vector<double> y(v.size()), mean(rows), rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) m += v[r * D + i];
    m /= double(D);
    for (int64_t i = 0; i < D; ++i) var += (v[r * D + i] - m) * (v[r * D + i] - m);
    var /= double(D);
    mean[r] = m;
    rstd[r] = 1 / std::sqrt(var + eps);
    for (int64_t i = 0; i < D; ++i) y[r * D + i] = (v[r * D + i] - m) * rstd[r] * wv[i] + bv[i];
  }
  const Shape stat(x.shape().begin(), x.shape().end() - 1);
  return {make_f64(x.shape(), y), make_f64(stat, mean), make_f64(stat, rstd)};
}

OpCase layer_norm_case(std::string label, const Shape& shape, bool weight, bool bias, double eps,
                       uint64_t seed) {
  OpCase c;
  c.label = std::move(label);
  const int64_t D = shape.back();
  c.inputs = {rand_f64(shape, seed, -2, 3), weight ? rand_f64({D}, seed + 1, 0.5, 1.5) : Tensor(),
              bias ? rand_f64({D}, seed + 2) : Tensor()};
  c.attrs = Attrs().set("eps", eps);
  c.reference = [eps](const std::vector<Tensor>& in, const Attrs&) {
    return layer_norm_ref(in[0], in[1], in[2], eps);
  };
  return c;
}

MERAK_OP_CASES(layer_norm) {
  std::vector<OpCase> cs = {
      layer_norm_case("weight and bias", {4, 6}, true, true, 1e-5, 21),
      layer_norm_case("no weight, no bias", {3, 5}, false, false, 1e-5, 22),
      layer_norm_case("weight only", {3, 5}, true, false, 1e-5, 23),
      layer_norm_case("bias only", {3, 5}, false, true, 1e-5, 24),
      layer_norm_case("3-D, eps 0.1", {2, 3, 4}, true, true, 0.1, 25),
      layer_norm_case("1-D", {8}, true, true, 1e-5, 26),
      layer_norm_case("long rows", {2, 70}, true, true, 1e-5, 27),
  };
  OpCase x_only;  // weight and bias omitted from the input list altogether
  x_only.label = "x only";
  x_only.inputs = {rand_f64({3, 4}, 28)};
  x_only.reference = [](const std::vector<Tensor>& in, const Attrs&) {
    return layer_norm_ref(in[0], Tensor(), Tensor(), 1e-5);
  };
  cs.push_back(x_only);
  OpCase big = layer_norm_case("256x300 forward", {256, 300}, true, true, 1e-5, 29);
  big.check_grad = false;
  cs.push_back(big);
  return cs;
}

// dx by the explicit Jacobian d xhat_i / d x_j = rstd (delta_ij - 1/D - xhat_i xhat_j / D);
// dweight and dbias by summing over rows.
std::vector<Tensor> layer_norm_grad_ref(const std::vector<Tensor>& in) {
  const Tensor &dyt = in[0], &xt = in[1], &wt = in[2];
  const int64_t D = xt.shape().back(), rows = xt.numel() / D;
  const std::vector<double> dy = values(dyt), x = values(xt), mean = values(in[3]),
                            rstd = values(in[4]);
  const std::vector<double> w = wt.defined() ? values(wt) : std::vector<double>(D, 1.0);
  std::vector<double> dx(x.size(), 0.0), dw(D, 0.0), db(D, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    auto xhat = [&](int64_t i) { return (x[r * D + i] - mean[r]) * rstd[r]; };
    for (int64_t j = 0; j < D; ++j)
      for (int64_t i = 0; i < D; ++i)
        dx[r * D + j] += dy[r * D + i] * w[i] * rstd[r] *
                         ((i == j ? 1.0 : 0.0) - 1.0 / D - xhat(i) * xhat(j) / D);
    for (int64_t i = 0; i < D; ++i) {
      dw[i] += dy[r * D + i] * xhat(i);
      db[i] += dy[r * D + i];
    }
  }
  return {make_f64(xt.shape(), dx), make_f64({D}, dw), make_f64({D}, db)};
}

OpCase layer_norm_grad_case(std::string label, const Shape& shape, bool weight, uint64_t seed) {
  OpCase c;
  c.label = std::move(label);
  const int64_t D = shape.back();
  const Tensor x = rand_f64(shape, seed, -2, 3);
  const auto fwd = layer_norm_ref(x, Tensor(), Tensor(), 1e-5);
  c.inputs = {rand_f64(shape, seed + 1), x, weight ? rand_f64({D}, seed + 2, 0.5, 1.5) : Tensor(),
              fwd[1], fwd[2]};
  c.reference = [](const std::vector<Tensor>& in, const Attrs&) {
    return layer_norm_grad_ref(in);
  };
  return c;
}

MERAK_OP_CASES(layer_norm_grad) {
  return {layer_norm_grad_case("with weight", {4, 6}, true, 31),
          layer_norm_grad_case("no weight", {3, 5}, false, 32),
          layer_norm_grad_case("3-D", {2, 3, 4}, true, 33),
          layer_norm_grad_case("long rows", {2, 70}, true, 34),
          // More rows than one 32-row block, so the per-block partial sums are combined.
          layer_norm_grad_case("100 rows", {100, 2}, true, 35),
          layer_norm_grad_case("300x40, several blocks and threads", {300, 40}, true, 36)};
}

// ---- embedding

Tensor embedding_ref(const Tensor& w, const Tensor& ids) {
  const int64_t D = w.shape()[1];
  const std::vector<double> wv = values(w), iv = values(ids);
  std::vector<double> out;
  for (double id : iv)
    for (int64_t i = 0; i < D; ++i) out.push_back(wv[size_t(int64_t(id) * D + i)]);
  Shape s = ids.shape();
  s.push_back(D);
  return make_f64(s, out);
}

OpCase embedding_case(std::string label, const Shape& w_shape, Tensor ids) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(w_shape, 41), ids};
  c.reference = [](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{embedding_ref(in[0], in[1])};
  };
  return c;
}

MERAK_OP_CASES(embedding) {
  return {
      embedding_case("i64 ids [2, 3], repeats", {5, 3}, rand_int({2, 3}, 42, 0, 5)),
      embedding_case("i32 ids [4]", {6, 4}, rand_int({4}, 43, 0, 6, DType::I32)),
      embedding_case("scalar id", {4, 3}, Tensor::from_vector<int64_t>({2}, {})),
      embedding_case("one row, every id", {1, 5}, Tensor::from_vector<int64_t>({0, 0, 0}, {3})),
      embedding_case("empty ids", {3, 2}, Tensor::zeros({0}, DType::I64)),
      embedding_case("long rows", {3, 40}, Tensor::from_vector<int32_t>({2, 0, 2}, {3})),
  };
}

Tensor embedding_grad_ref(const Tensor& dy, const Tensor& ids, int64_t V) {
  const int64_t D = dy.shape().back();
  const std::vector<double> g = values(dy), iv = values(ids);
  std::vector<double> out(size_t(V * D), 0.0);
  for (size_t r = 0; r < iv.size(); ++r)
    for (int64_t i = 0; i < D; ++i) out[size_t(int64_t(iv[r]) * D + i)] += g[r * D + i];
  return make_f64({V, D}, out);
}

OpCase embedding_grad_case(std::string label, Tensor ids, int64_t V, int64_t D, uint64_t seed) {
  OpCase c;
  c.label = std::move(label);
  Shape s = ids.shape();
  s.push_back(D);
  c.inputs = {rand_f64(s, seed), ids};
  c.attrs = Attrs().set("num_embeddings", V);
  c.reference = [V](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{embedding_grad_ref(in[0], in[1], V)};
  };
  return c;
}

MERAK_OP_CASES(embedding_grad) {
  return {
      embedding_grad_case("repeated i64 ids", rand_int({2, 6}, 51, 0, 4), 4, 3, 52),
      embedding_grad_case("i32 ids, unused rows", rand_int({5}, 53, 0, 3, DType::I32), 8, 2, 54),
      embedding_grad_case("scalar id", Tensor::from_vector<int64_t>({1}, {}), 3, 4, 55),
      embedding_grad_case("empty ids", Tensor::zeros({0}, DType::I64), 3, 2, 56),
      embedding_grad_case("many rows, wide", rand_int({600}, 57, 0, 50), 50, 100, 58),
  };
}

// ---- cross_entropy

// loss (mean over rows whose target != ignore) and lse per row.
std::vector<Tensor> cross_entropy_ref(const Tensor& logits, const Tensor& targets, int64_t ignore) {
  const int64_t V = logits.shape().back(), rows = logits.numel() / V;
  const std::vector<double> x = values(logits), t = values(targets);
  std::vector<double> lse(rows);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double m = x[r * V];
    for (int64_t i = 0; i < V; ++i) m = std::max(m, x[r * V + i]);
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += std::exp(x[r * V + i] - m);
    lse[r] = m + std::log(s);
    if (int64_t(t[r]) == ignore) continue;
    total += lse[r] - x[r * V + int64_t(t[r])];
    ++count;
  }
  return {make_f64({}, {count ? total / double(count) : 0.0}), make_f64(targets.shape(), lse)};
}

OpCase cross_entropy_case(std::string label, const Shape& shape, Tensor targets,
                          int64_t ignore = -100, double lo = -3, double hi = 3) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(shape, 61, lo, hi), targets};
  c.attrs = Attrs().set("ignore_index", ignore);
  c.reference = [ignore](const std::vector<Tensor>& in, const Attrs&) {
    return cross_entropy_ref(in[0], in[1], ignore);
  };
  return c;
}

MERAK_OP_CASES(cross_entropy) {
  std::vector<OpCase> cs = {
      cross_entropy_case("[4, 6] i64", {4, 6}, rand_int({4}, 62, 0, 6)),
      cross_entropy_case("3-D i32", {2, 3, 5}, rand_int({2, 3}, 63, 0, 5, DType::I32)),
      cross_entropy_case("some ignored (-100)", {4, 5},
                         Tensor::from_vector<int64_t>({1, -100, 4, -100}, {4})),
      cross_entropy_case("ignore_index 2", {5, 3},
                         Tensor::from_vector<int64_t>({2, 0, 2, 1, 2}, {5}), 2),
      cross_entropy_case("all ignored", {2, 4}, Tensor::from_vector<int64_t>({-100, -100}, {2})),
      cross_entropy_case("1-D logits, scalar target", {7}, Tensor::from_vector<int64_t>({3}, {})),
      cross_entropy_case("one class", {3, 1}, Tensor::from_vector<int32_t>({0, 0, 0}, {3})),
      cross_entropy_case("long rows, offset 50", {2, 75},
                         Tensor::from_vector<int64_t>({74, 0}, {2}), -100, 48, 52),
  };
  OpCase big = cross_entropy_case("128x500 forward", {128, 500}, rand_int({128}, 64, -1, 500),
                                  -1);
  big.check_grad = false;
  cs.push_back(big);
  return cs;
}

// dloss * (softmax - onehot) / count, from the given lse; zero rows for ignored targets.
Tensor cross_entropy_grad_ref(const std::vector<Tensor>& in, int64_t ignore) {
  const double dloss = values(in[0])[0];
  const int64_t V = in[1].shape().back(), rows = in[1].numel() / V;
  const std::vector<double> x = values(in[1]), t = values(in[2]), lse = values(in[3]);
  int64_t count = 0;
  for (double v : t) count += int64_t(v) != ignore;
  std::vector<double> dx(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (int64_t(t[r]) == ignore) continue;
    for (int64_t i = 0; i < V; ++i)
      dx[r * V + i] = dloss * (std::exp(x[r * V + i] - lse[r]) - (i == int64_t(t[r]))) / count;
  }
  return make_f64(in[1].shape(), dx);
}

OpCase cross_entropy_grad_case(std::string label, const Shape& shape, Tensor targets,
                               int64_t ignore, uint64_t seed) {
  OpCase c;
  c.label = std::move(label);
  const Tensor logits = rand_f64(shape, seed, -3, 3);
  const Tensor lse = cross_entropy_ref(logits, targets, ignore)[1];
  c.inputs = {make_f64({}, {0.7}), logits, targets, lse};
  c.attrs = Attrs().set("ignore_index", ignore);
  c.reference = [ignore](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{cross_entropy_grad_ref(in, ignore)};
  };
  return c;
}

MERAK_OP_CASES(cross_entropy_grad) {
  return {
      cross_entropy_grad_case("[4, 6] i64", {4, 6}, rand_int({4}, 71, 0, 6), -100, 72),
      cross_entropy_grad_case("3-D i32", {2, 2, 5}, rand_int({2, 2}, 73, 0, 5, DType::I32), -100,
                              74),
      cross_entropy_grad_case("ignored rows", {3, 4},
                              Tensor::from_vector<int64_t>({-100, 2, -100}, {3}), -100, 75),
      cross_entropy_grad_case("all ignored", {2, 3}, Tensor::from_vector<int64_t>({1, 1}, {2}), 1,
                              76),
      cross_entropy_grad_case("long rows", {2, 70}, Tensor::from_vector<int64_t>({5, 69}, {2}),
                              -100, 77),
  };
}

// ---- dropout: the reference recomputes the Philox mask.

// x holds `rows` samples from row `first_row` of a global batch (rows 0: not placed): element i
// draws as element first_row * (elements a sample) + i of the batch.
OpCase dropout_case(std::string label, const Shape& shape, double p, int64_t key, int64_t stream,
                    int64_t first_row = 0, int64_t rows = 0) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(shape, 81)};
  c.attrs = Attrs().set("p", p).set("key", key).set("stream", stream);
  if (rows > 0) c.attrs.set("first_row", first_row).set("rows", rows);
  const uint64_t offset = rows > 0 ? uint64_t(first_row * (numel(shape) / rows)) : 0;
  c.reference = [p, key, stream, offset](const std::vector<Tensor>& in, const Attrs&) {
    std::vector<double> v = values(in[0]);
    for (size_t i = 0; i < v.size(); ++i) {
      const bool keep = philox_uniform(uint64_t(key), offset + i, uint64_t(stream)) >= p;
      v[i] = keep ? v[i] / (1 - p) : 0.0;
    }
    return std::vector<Tensor>{make_f64(in[0].shape(), v)};
  };
  return c;
}

// A tensor-parallel piece: x holds the unsplit tensor's indices `kept` (in order) of dim `dim`,
// as `runs` runs from `start`; the reference draws each element by its index in the unsplit
// tensor, found from `kept` alone.
OpCase dropout_piece_case(std::string label, const Shape& unsplit, int64_t dim,
                          const std::vector<int64_t>& kept, int64_t start, int64_t runs,
                          double p, int64_t key, int64_t stream, int64_t first_row = 0,
                          int64_t rows = 0) {
  Shape local = unsplit;
  local[size_t(dim)] = int64_t(kept.size());
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(local, 83)};
  c.attrs = Attrs()
                .set("p", p)
                .set("key", key)
                .set("stream", stream)
                .set("split_dim", dim)
                .set("split_size", unsplit[size_t(dim)])
                .set("split_start", start)
                .set("split_runs", runs);
  if (rows > 0) c.attrs.set("first_row", first_row).set("rows", rows);
  const int64_t offset = rows > 0 ? first_row * (numel(unsplit) / rows) : 0;
  c.reference = [=](const std::vector<Tensor>& in, const Attrs&) {
    std::vector<double> v = values(in[0]);
    for (size_t i = 0; i < v.size(); ++i) {
      // Local multi-index of i, its dim coordinate replaced by the kept index: the unsplit one.
      int64_t rest = int64_t(i), flat = offset, scale = 1;
      for (int64_t d = int64_t(local.size()) - 1; d >= 0; --d) {
        const int64_t coord = rest % local[size_t(d)];
        rest /= local[size_t(d)];
        flat += (d == dim ? kept[size_t(coord)] : coord) * scale;
        scale *= unsplit[size_t(d)];
      }
      const bool keep = philox_uniform(uint64_t(key), uint64_t(flat), uint64_t(stream)) >= p;
      v[i] = keep ? v[i] / (1 - p) : 0.0;
    }
    return std::vector<Tensor>{make_f64(in[0].shape(), v)};
  };
  return c;
}

MERAK_OP_CASES(dropout) {
  OpCase big = dropout_case("100k elements forward", {100, 1000}, 0.25, 99, 3);
  big.check_grad = false;
  // A rank's piece of [B, T, 3H] (Q, K, V of 4 heads of 2): its heads 2-3 of each, 3 runs.
  OpCase qkv = dropout_piece_case("piece of a fused QKV, 3 runs", {2, 3, 24}, 2,
                                  {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23}, 4, 3, 0.4, 17, 5);
  // Columns 1024-2047 of [40, 2048]: rows of a piece cross the threads' chunks.
  std::vector<int64_t> upper;
  for (int64_t j = 1024; j < 2048; ++j) upper.push_back(j);
  OpCase wide = dropout_piece_case("piece of a wide last dim, threaded", {40, 2048}, 1, upper,
                                   1024, 1, 0.3, 23, 2);
  wide.check_grad = false;
  return {dropout_case("p 0.3", {4, 8}, 0.3, 1234, 0),
          dropout_case("p 0.3, another stream", {4, 8}, 0.3, 1234, 7),
          dropout_case("p 0.5, 3-D", {2, 3, 5}, 0.5, 42, 1),
          dropout_case("p 0 is the identity", {3, 4}, 0.0, 5, 0),
          dropout_case("p 0.9, negative key", {50}, 0.9, -77, 2), big,
          // Heads 1-2 of 4 of [B, H, T, T] probabilities: one run along dim 1.
          dropout_piece_case("piece of attention probabilities, heads 1-2 of 4", {2, 4, 3, 3}, 1,
                             {1, 2}, 1, 1, 0.5, 31, 4),
          // The split dim first: x's rows 3-5 of 6.
          dropout_piece_case("piece along dim 0", {6, 5}, 0, {3, 4, 5}, 3, 1, 0.3, -9, 1),
          qkv, wide,
          // Micro-batches placed in the global batch: samples from row 6, 4 of them; and a
          // tensor of [rows * T, C] (a sample is T rows of it); and a piece of heads.
          dropout_case("samples 6-9 of a batch", {4, 3, 5}, 0.3, 8, 2, 6, 4),
          dropout_case("samples 2-3 as [rows * T, C]", {6, 4}, 0.5, 8, 2, 2, 2),
          dropout_piece_case("piece of heads 1-2 of 4, samples 4-5", {2, 4, 3, 3}, 1, {1, 2}, 1,
                             1, 0.5, 31, 4, 4, 2)};
}

// ---- what the harness cannot express

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("nn ops: bad ids, targets and p are errors naming the value", "[ops][nn]") {
  const Tensor w = Tensor::ones({5, 3});
  const std::string e1 =
      error_of([&] { ops::embedding(w, Tensor::from_vector<int64_t>({1, 7}, {2})); });
  CHECK_THAT(e1, Catch::Contains("id 7") && Catch::Contains("5 embeddings"));
  const std::string e2 =
      error_of([&] { ops::embedding(w, Tensor::from_vector<int32_t>({-1}, {1})); });
  CHECK_THAT(e2, Catch::Contains("id -1"));
  const Tensor logits = Tensor::zeros({2, 4});
  const std::string e3 =
      error_of([&] { ops::cross_entropy(logits, Tensor::from_vector<int64_t>({0, 4}, {2})); });
  CHECK_THAT(e3, Catch::Contains("target 4") && Catch::Contains("4 classes"));
  const std::string e4 =
      error_of([&] { ops::cross_entropy(logits, Tensor::from_vector<int64_t>({-1, 0}, {2})); });
  CHECK_THAT(e4, Catch::Contains("target -1"));
  CHECK_THAT(error_of([&] { ops::dropout(logits, 1.0, 1, 0); }), Catch::Contains("p must be"));
  // A piece of 4 columns cannot start at column 6 of 8, nor fall into 3 runs.
  const auto piece = [&](int64_t start, int64_t runs) {
    return error_of([&] {
      ops::call1(ops::Registry::get().at("dropout"), {logits},
                 Attrs().set("p", 0.5).set("key", int64_t(1)).set("split_dim", int64_t(1))
                     .set("split_size", int64_t(8)).set("split_start", start)
                     .set("split_runs", runs));
    });
  };
  CHECK(piece(4, 1).empty());
  CHECK_THAT(piece(6, 1), Catch::Contains("from split_start 6"));
  CHECK_THAT(piece(0, 3), Catch::Contains("split_runs 3"));
  CHECK_THAT(error_of([&] { ops::cross_entropy(logits, Tensor::zeros({3}, DType::I64)); }),
             Catch::Contains("targets [3]"));
  CHECK_THAT(error_of([&] { ops::layer_norm(logits, Tensor::ones({3}), Tensor()); }),
             Catch::Contains("weight"));
}

TEST_CASE("nn ops: gradient reductions do not depend on the thread count", "[ops][nn]") {
  const int saved = num_threads();
  const Tensor dy = rand_f64({1000, 64}, 91);
  auto f32 = [](const Tensor& t) {
    Tensor o = Tensor::empty(t.shape(), DType::F32);
    const auto v = values(t);
    for (size_t i = 0; i < v.size(); ++i) o.data<float>()[i] = float(v[i]);
    return o;
  };
  const Tensor dy32 = f32(dy), x32 = f32(rand_f64({1000, 64}, 92)), w32 = f32(rand_f64({64}, 93));
  const Tensor ids = rand_int({1000}, 94, 0, 30);
  auto run = [&](int threads) {
    set_num_threads(threads);
    const auto ln = ops::call("layer_norm", {x32, w32, Tensor()});
    const auto g = ops::call("layer_norm_grad", {dy32, x32, w32, ln[1], ln[2]});
    return std::vector<std::vector<float>>{g[0].to_vector<float>(), g[1].to_vector<float>(),
                                           g[2].to_vector<float>(),
                                           ops::embedding_grad(dy32, ids, 30).to_vector<float>()};
  };
  const auto one = run(1), two = run(2), three = run(3);
  set_num_threads(saved);
  CHECK(one == two);
  CHECK(one == three);
}

TEST_CASE("vec_math: the vectorised f32 exp is within 1.5e-7 relative of exp", "[ops][nn]") {
  double worst = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.00137f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(cpu::exp_sat_f32(x)) - want) / want);
  }
  CHECK(worst < 1.5e-7);
  for (float x = -87.0f; x < 88.0f; x += 0.00137f)
    CHECK(cpu::exp_bounded_f32(x) == cpu::exp_sat_f32(x));
  CHECK(cpu::exp_bounded_f32(-INFINITY) == 0.0f);
  CHECK(std::isnan(cpu::exp_bounded_f32(NAN)));
  CHECK(cpu::exp_sat_f32(-200.0f) == 0.0f);
  CHECK(cpu::exp_sat_f32(-87.5f) == 0.0f);  // results below FLT_MIN flush to 0
  CHECK(std::isinf(cpu::exp_sat_f32(100.0f)));
  CHECK(std::isnan(cpu::exp_sat_f32(NAN)));
}

TEST_CASE("nn ops: dropout keeps about 1 - p of the elements", "[ops][nn]") {
  const Tensor x = Tensor::ones({200000});
  const std::vector<float> y = ops::dropout(x, 0.2, 17, 4).to_vector<float>();
  int64_t kept = 0;
  for (float v : y) kept += v != 0;
  CHECK(std::fabs(double(kept) / double(y.size()) - 0.8) < 0.005);
}

}  // namespace
}  // namespace merak::test
