// Harness cases for the tensor-parallel ops. The harness runs them in a group of one member (no
// collective installed: the reductions are no-ops), which checks the local arithmetic: the
// vocabulary-parallel ops with an offset part of the vocabulary, targets and ids outside it.
// The tests below install a collective to check what goes through it; the partitioner's tests
// run real groups of threads (tests/partition).
#include <catch2/catch.hpp>

#include <cmath>
#include <mutex>
#include <thread>

#include "merak/ops/collectives.h"
#include "merak/ops/functional.h"
#include "tests/ops/harness.h"

namespace merak::test {
namespace {

Attrs group_attrs() { return Attrs().set("group", "tp").set("size", int64_t(1)); }

OpCase identity_case(std::string label, const Shape& shape, uint64_t seed) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(shape, seed)};
  c.attrs = group_attrs();
  c.reference = [](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{in[0]};
  };
  return c;
}

// Rows [start, start + V) of a table, zeros for ids outside.
Tensor tp_embedding_ref(const Tensor& w, const Tensor& ids, int64_t start) {
  const int64_t V = w.shape()[0], D = w.shape()[1];
  const std::vector<double> wv = values(w), iv = values(ids);
  std::vector<double> out;
  for (double id : iv) {
    const int64_t row = int64_t(id) - start;
    for (int64_t i = 0; i < D; ++i)
      out.push_back(row >= 0 && row < V ? wv[size_t(row * D + i)] : 0.0);
  }
  Shape s = ids.shape();
  s.push_back(D);
  return make_f64(s, out);
}

// Per row over this member's classes: lse and the target logit (0 when the target is elsewhere);
// loss = mean over non-ignored rows of lse - target logit.
std::vector<Tensor> tp_cross_entropy_ref(const Tensor& logits, const Tensor& targets,
                                         int64_t start, int64_t ignore) {
  const int64_t V = logits.shape().back(), rows = logits.numel() / V;
  const std::vector<double> x = values(logits), t = values(targets);
  std::vector<double> lse(static_cast<size_t>(rows), 0.0);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t i = 0; i < V; ++i) m = std::max(m, x[size_t(r * V + i)]);
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += std::exp(x[size_t(r * V + i)] - m);
    lse[size_t(r)] = m + std::log(s);
    if (int64_t(t[size_t(r)]) == ignore) continue;
    const int64_t c = int64_t(t[size_t(r)]) - start;
    total += lse[size_t(r)] - (c >= 0 && c < V ? x[size_t(r * V + c)] : 0.0);
    ++count;
  }
  return {make_f64({}, {count ? total / double(count) : 0.0}), make_f64(targets.shape(), lse)};
}

OpCase tp_cross_entropy_case(std::string label, const Shape& shape, Tensor targets, int64_t start,
                             int64_t ignore = -100) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(shape, 71, -3, 3), targets};
  c.attrs = group_attrs().set("start", start).set("ignore_index", ignore);
  c.reference = [start, ignore](const std::vector<Tensor>& in, const Attrs&) {
    return tp_cross_entropy_ref(in[0], in[1], start, ignore);
  };
  return c;
}

}  // namespace

MERAK_OP_CASES(tp_all_reduce) {
  return {identity_case("[2, 3, 4]", {2, 3, 4}, 1), identity_case("scalar", {}, 2)};
}

MERAK_OP_CASES(tp_copy) {
  return {identity_case("[4, 5]", {4, 5}, 3), identity_case("[1, 7, 2]", {1, 7, 2}, 4)};
}

MERAK_OP_CASES(tp_all_gather) {
  OpCase a = identity_case("one member, last dim", {2, 3, 4}, 5);
  a.attrs.set("index", int64_t(0)).set("sizes", std::vector<int64_t>{4}).set("dim", int64_t(-1));
  OpCase b = identity_case("one member, dim 0", {3, 2}, 6);
  b.attrs.set("index", int64_t(0)).set("sizes", std::vector<int64_t>{3}).set("dim", int64_t(0));
  return {a, b};
}

MERAK_OP_CASES(tp_embedding) {
  auto make = [](std::string label, const Shape& w_shape, Tensor ids, int64_t start) {
    OpCase c;
    c.label = std::move(label);
    c.inputs = {rand_f64(w_shape, 81), ids};
    c.attrs = Attrs().set("start", start);
    c.reference = [start](const std::vector<Tensor>& in, const Attrs&) {
      return std::vector<Tensor>{tp_embedding_ref(in[0], in[1], start)};
    };
    return c;
  };
  return {
      make("first part, ids beyond it", {4, 3}, rand_int({2, 5}, 82, 0, 9), 0),
      make("middle part, ids on both sides", {3, 4}, rand_int({7}, 83, 0, 10, DType::I32), 4),
      make("last part", {2, 5}, Tensor::from_vector<int64_t>({7, 8, 0, 8}, {4}), 7),
      make("no id in this part", {2, 2}, Tensor::from_vector<int64_t>({0, 1}, {2}), 5),
  };
}

MERAK_OP_CASES(tp_embedding_grad) {
  auto make = [](std::string label, Tensor ids, int64_t V, int64_t D, int64_t start) {
    OpCase c;
    c.label = std::move(label);
    Shape s = ids.shape();
    s.push_back(D);
    c.inputs = {rand_f64(s, 91), ids};
    c.attrs = Attrs().set("start", start).set("num_embeddings", V);
    c.reference = [V, D, start](const std::vector<Tensor>& in, const Attrs&) {
      const std::vector<double> g = values(in[0]), iv = values(in[1]);
      std::vector<double> out(size_t(V * D), 0.0);
      for (size_t r = 0; r < iv.size(); ++r) {
        const int64_t row = int64_t(iv[r]) - start;
        if (row < 0 || row >= V) continue;
        for (int64_t i = 0; i < D; ++i) out[size_t(row * D + i)] += g[r * size_t(D) + size_t(i)];
      }
      return std::vector<Tensor>{make_f64({V, D}, out)};
    };
    return c;
  };
  return {
      make("repeats, some outside", rand_int({3, 4}, 92, 0, 8), 4, 3, 2),
      make("i32 ids, all outside", Tensor::from_vector<int32_t>({0, 1}, {2}), 3, 2, 5),
  };
}

MERAK_OP_CASES(tp_cross_entropy) {
  return {
      tp_cross_entropy_case("whole vocabulary", {4, 6}, rand_int({4}, 72, 0, 6), 0),
      tp_cross_entropy_case("second part: targets on both sides", {5, 4},
                            Tensor::from_vector<int64_t>({0, 5, 7, 9, 4}, {5}), 4),
      tp_cross_entropy_case("3-D, some ignored", {2, 3, 5},
                            Tensor::from_vector<int32_t>({1, -100, 6, 3, -100, 0}, {2, 3}), 2),
      tp_cross_entropy_case("all ignored", {2, 3}, Tensor::from_vector<int64_t>({-1, -1}, {2}), 0,
                            -1),
  };
}

MERAK_OP_CASES(tp_cross_entropy_grad) {
  auto make = [](std::string label, const Shape& shape, Tensor targets, int64_t start) {
    OpCase c;
    c.label = std::move(label);
    const Tensor logits = rand_f64(shape, 73, -3, 3);
    // lse of a larger vocabulary than this part: the other members' classes add to it.
    const Tensor lse = ops::add_scalar(tp_cross_entropy_ref(logits, targets, start, -100)[1], 0.4);
    c.inputs = {make_f64({}, {0.7}), logits, targets, lse};
    c.attrs = Attrs().set("start", start).set("ignore_index", int64_t(-100));
    c.reference = [start](const std::vector<Tensor>& in, const Attrs&) {
      const double dloss = values(in[0])[0];
      const int64_t V = in[1].shape().back(), rows = in[1].numel() / V;
      const std::vector<double> x = values(in[1]), t = values(in[2]), lse = values(in[3]);
      int64_t count = 0;
      for (double v : t) count += int64_t(v) != -100;
      std::vector<double> dx(x.size(), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        if (int64_t(t[size_t(r)]) == -100) continue;
        for (int64_t i = 0; i < V; ++i)
          dx[size_t(r * V + i)] = dloss *
                                  (std::exp(x[size_t(r * V + i)] - lse[size_t(r)]) -
                                   (i + start == int64_t(t[size_t(r)]) ? 1.0 : 0.0)) /
                                  double(count);
      }
      return std::vector<Tensor>{make_f64(in[1].shape(), dx)};
    };
    return c;
  };
  return {make("offset part", {3, 4}, Tensor::from_vector<int64_t>({1, 5, -100}, {3}), 3),
          make("first part", {2, 5}, Tensor::from_vector<int64_t>({0, 9}, {2}), 0)};
}

// What goes through the collectives: tp_all_reduce hands its group, size and a copy of x to them;
// tp_copy's gradient is reduced; tp_all_gather places this member's part before reducing.
TEST_CASE("tp ops reduce through the thread's collectives", "[ops]") {
  // Stands in for a group of two whose other member holds the same values: a sum doubles.
  struct Doubling : ops::TpCollectives {
    std::vector<std::string> seen;
    void reduce(const Tensor& t, ops::TpReduce op, const std::string& group,
                int64_t size) override {
      seen.push_back(group + "/" + std::to_string(size) +
                     (op == ops::TpReduce::Sum ? "/sum" : "/max"));
      if (op == ops::TpReduce::Sum) {
        double* p = t.data<double>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] *= 2;
      }
    }
  } doubling;
  const Tensor x = rand_f64({2, 3}, 7);
  {
    ops::TpScope scope(&doubling);
    const Tensor y = ops::tp_all_reduce(x, "tp.pp0.dp0", 2);
    for (int64_t i = 0; i < x.numel(); ++i) CHECK(values(y)[size_t(i)] == 2 * values(x)[size_t(i)]);
    CHECK(values(x) == values(rand_f64({2, 3}, 7)));  // the input is untouched
    REQUIRE(doubling.seen == std::vector<std::string>{"tp.pp0.dp0/2/sum"});

    const Tensor g = ops::tp_all_gather(rand_f64({2, 1}, 8), "g", 2, 1, {2, 1}, -1);
    CHECK(g.shape() == Shape{2, 3});
    const std::vector<double> gv = values(g), part = values(rand_f64({2, 1}, 8));
    CHECK(gv == std::vector<double>{0, 0, 2 * part[0], 0, 0, 2 * part[1]});

    doubling.seen.clear();
    const Tensor logits = rand_f64({3, 4}, 9);
    ops::tp_cross_entropy(logits, Tensor::from_vector<int64_t>({0, 1, 2}, {3}), 0, "ce", 2);
    CHECK(doubling.seen == std::vector<std::string>{"ce/2/max", "ce/2/sum", "ce/2/sum"});
  }
  // Outside the scope nothing serves a group of two (one needs nothing), and another thread
  // never sees this thread's collectives.
  CHECK_THROWS_WITH(ops::tp_all_reduce(x, "lonely", 2),
                    Catch::Contains("no collectives serve tensor-parallel group 'lonely' of 2"));
  CHECK(values(ops::tp_all_reduce(x, "alone", 1)) == values(x));
  ops::TpScope scope(&doubling);
  std::string other_thread;
  std::thread([&] {
    try {
      ops::tp_all_reduce(x, "elsewhere", 2);
    } catch (const std::exception& e) {
      other_thread = e.what();
    }
  }).join();
  CHECK_THAT(other_thread, Catch::Contains("no collectives serve tensor-parallel group 'elsewhere'"));
}

}  // namespace merak::test
