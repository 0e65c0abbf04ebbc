#include "merak/partition/simulate.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "merak/autograd/engine.h"
#include "merak/autograd/grad_mode.h"
#include "merak/autograd/node.h"
#include "merak/core/philox.h"
#include "merak/graph/convert.h"
#include "merak/graph/initializer_values.h"
#include "merak/graph/executor.h"
#include "merak/nn/module.h"
#include "merak/ops/functional.h"

namespace merak::partition {
namespace {

nn::Init init_of(const graph::InitSpec& spec) {
  switch (spec.kind()) {
    case graph::InitSpec::ZEROS: return nn::Init::zeros();
    case graph::InitSpec::ONES: return nn::Init::ones();
    default: return nn::Init::normal(spec.std());
  }
}

bool whole(const ParamShard& p) {
  if (p.boxes_size() != 1) return false;
  const Box& b = p.boxes(0);
  for (int d = 0; d < p.full_shape_size(); ++d)
    if (b.offsets(d) != 0 || b.sizes(d) != p.full_shape(d)) return false;
  return true;
}

Shape shape_of(const google::protobuf::RepeatedField<int64_t>& dims) {
  return Shape(dims.begin(), dims.end());
}

// full[box] += part, both f32 contiguous, part shaped like the box.
void add_box(const Tensor& full, const Tensor& part, const Box& box) {
  const Shape fs = full.shape(), ps = part.shape();
  const int64_t rank = int64_t(fs.size());
  std::vector<int64_t> stride(size_t(rank), 1);
  for (int64_t d = rank - 2; d >= 0; --d) stride[size_t(d)] = stride[size_t(d + 1)] * fs[size_t(d + 1)];
  float* dst = full.data<float>();
  const float* src = part.data<float>();
  std::vector<int64_t> idx(size_t(rank), 0);
  for (int64_t i = 0; i < part.numel(); ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off += (box.offsets(int(d)) + idx[size_t(d)]) * stride[size_t(d)];
    dst[off] += src[i];
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < ps[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

}  // namespace

// Values of an f32 or f64 tensor as doubles, and back.
std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == DType::F64) return t.to_vector<double>();
  MERAK_CHECK(t.dtype() == DType::F32, "in-process collective: dtype ", dtype_name(t.dtype()),
              " not supported (f32, f64)");
  const std::vector<float> f = t.to_vector<float>();
  return std::vector<double>(f.begin(), f.end());
}

void write_doubles(const Tensor& t, const std::vector<double>& v) {
  if (t.dtype() == DType::F64) {
    std::copy(v.begin(), v.end(), t.data<double>());
  } else {
    float* p = t.data<float>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = float(v[i]);
  }
}

struct InProcessCollective::Meeting {
  std::vector<std::vector<double>> parts;
  std::vector<bool> arrived_from;
  std::vector<double> result;
  int64_t arrived = 0, departed = 0;
  bool distributing = false;
};

void InProcessCollective::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void InProcessCollective::meet(const Tensor& t, ops::TpReduce op, const std::string& group,
                               int64_t size, int64_t member) {
  MERAK_CHECK(member >= 0 && member < size, "in-process collective: member ", member,
              " of group '", group, "' of ", size);
  std::unique_lock<std::mutex> lock(mu_);
  auto& slot = meetings_[group];
  if (!slot) slot = std::make_shared<Meeting>();
  std::shared_ptr<Meeting> m = slot;
  auto check = [&] { MERAK_CHECK(!aborted_, "in-process collective '", group, "': a member failed"); };
  // Wait out the previous round's hand-back.
  cv_.wait(lock, [&] { return aborted_ || !m->distributing; });
  check();
  if (m->parts.empty()) {
    m->parts.resize(size_t(size));
    m->arrived_from.assign(size_t(size), false);
  }
  MERAK_CHECK(int64_t(m->parts.size()) == size && !m->arrived_from[size_t(member)],
              "in-process collective '", group, "': inconsistent group size or repeated member");
  m->parts[size_t(member)] = as_doubles(t);
  m->arrived_from[size_t(member)] = true;
  if (++m->arrived == size) {
    // Combine in member order, so the result does not depend on thread timing.
    std::vector<double> acc = m->parts[0];
    for (int64_t i = 1; i < size; ++i) {
      const std::vector<double>& b = m->parts[size_t(i)];
      MERAK_CHECK(b.size() == acc.size(), "in-process collective '", group,
                  "': members' tensors differ in size");
      for (size_t k = 0; k < acc.size(); ++k)
        acc[k] = op == ops::TpReduce::Sum ? acc[k] + b[k] : std::max(acc[k], b[k]);
    }
    m->result = std::move(acc);
    m->distributing = true;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return aborted_ || m->distributing; });
    check();
  }
  write_doubles(t, m->result);
  if (++m->departed == size) {
    m->parts.clear();
    m->arrived_from.clear();
    m->result.clear();
    m->arrived = m->departed = 0;
    m->distributing = false;
    cv_.notify_all();
  }
}

Tensor shard_values(const ParamShard& shard, uint64_t seed) {
  const Shape full = shape_of(shard.full_shape());
  const DType dtype = graph::from_proto(shard.dtype());
  std::vector<Tensor> pieces;
  for (const Box& b : shard.boxes()) {
    Tensor t = Tensor::empty(shape_of(b.sizes()), dtype);
    SliceOf slice;
    slice.full_shape = full;
    slice.offsets = shape_of(b.offsets());
    nn::initialize(t, shard.name(), init_of(shard.init()), seed, slice);
    pieces.push_back(t);
  }
  if (pieces.size() == 1) return pieces[0];
  autograd::NoGradGuard no_grad;
  return ops::concat(pieces, shard.concat_dim());
}

graph::Model rank_model(const Plan& plan, const RankProgram& rank, uint64_t seed) {
  graph::Model m;
  m.set_producer(plan.producer());
  *m.mutable_graph() = rank.graph();
  std::map<std::string, const ParamShard*> shards;
  for (const ParamShard& p : rank.params()) shards[p.name()] = &p;
  for (graph::Initializer& init : *m.mutable_graph()->mutable_initializers()) {
    auto it = shards.find(init.name());
    if (graph::has_values(init) || it == shards.end() || whole(*it->second)) continue;
    init.set_data(graph::tensor_bytes(shard_values(*it->second, seed)));
  }
  return m;
}

StepResult run_step(const Plan& plan, const std::map<std::string, Tensor>& batch, uint64_t seed) {
  const int64_t pp = plan.layout().pp(), tp = plan.layout().tp();
  MERAK_CHECK(plan.layout().dp() == 1, "run_step simulates dp = 1 plans, got dp ",
              plan.layout().dp());
  auto rank_at = [&](int64_t s, int64_t t) -> const RankProgram& {
    return plan.ranks(int(s * tp + t));
  };

  InProcessCollective collective;
  // Per tp rank: parameter gradients per stage, and the loss.
  std::vector<std::vector<std::vector<std::pair<std::string, Tensor>>>> grads(static_cast<size_t>(tp));
  std::vector<double> losses(static_cast<size_t>(tp), 0.0);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(tp));

  auto run_member = [&](int64_t t) {
    InProcessCollective::Member member(collective, t);
    ops::TpScope scope(&member);
    std::vector<std::unique_ptr<graph::Executor>> ex;
    for (int64_t s = 0; s < pp; ++s)
      ex.push_back(std::make_unique<graph::Executor>(rank_model(plan, rank_at(s, t), seed), seed));
    // Forward, stage by stage: what a stage sends becomes the next stage's leaves.
    std::vector<std::map<std::string, Tensor>> received(static_cast<size_t>(pp));
    std::vector<std::vector<Tensor>> outputs(static_cast<size_t>(pp));
    for (int64_t s = 0; s < pp; ++s) {
      const RankProgram& r = rank_at(s, t);
      std::map<std::string, Tensor> in;
      for (const std::string& name : r.data_inputs()) {
        auto it = batch.find(name);
        MERAK_CHECK(it != batch.end(), "run_step: the batch has no '", name, "'");
        in[name] = it->second;
      }
      for (const auto& [name, value] : received[size_t(s)]) in[name] = value;
      outputs[size_t(s)] = ex[size_t(s)]->run(in);
      if (s + 1 == pp) break;
      const graph::Graph& g = r.graph();
      for (int k = 0; k < g.outputs_size(); ++k)
        for (const Boundary& b : r.boundaries())
          if (b.direction() == Boundary::SEND && b.value() == g.outputs(k).name()) {
            Tensor leaf = outputs[size_t(s)][size_t(k)].detach();
            if (b.has_grad()) leaf.set_requires_grad(true);
            received[size_t(s + 1)][b.value()] = leaf;
          }
    }
    // Backward in reverse: a stage's roots are its loss and what it sent, seeded with the
    // gradients its successor's leaves collected.
    for (int64_t s = pp - 1; s >= 0; --s) {
      const RankProgram& r = rank_at(s, t);
      const graph::Graph& g = r.graph();
      std::vector<Tensor> roots, seeds;
      for (int k = 0; k < g.outputs_size(); ++k) {
        const Tensor& out = outputs[size_t(s)][size_t(k)];
        if (!autograd::needs_grad(out)) continue;
        bool sent = false;
        for (const Boundary& b : r.boundaries())
          sent = sent || (b.direction() == Boundary::SEND && b.value() == g.outputs(k).name());
        if (!sent) {  // a graph output: the loss, or logits
          roots.push_back(out);
          seeds.push_back(Tensor::ones(out.shape(), out.dtype()));
          continue;
        }
        const Tensor grad = received[size_t(s + 1)].at(g.outputs(k).name()).grad();
        roots.push_back(out);
        seeds.push_back(grad.defined() ? grad : Tensor::zeros(out.shape(), out.dtype()));
      }
      if (!roots.empty()) autograd::backward(roots, seeds);
    }
    double sum = 0;
    for (double x : ops::cast(outputs[size_t(pp - 1)][0].detach(), DType::F64).to_vector<double>())
      sum += x;
    losses[size_t(t)] = sum;
    for (int64_t s = 0; s < pp; ++s) grads[size_t(t)].push_back(ex[size_t(s)]->parameters());
  };

  std::vector<std::thread> threads;
  for (int64_t t = 0; t < tp; ++t)
    threads.emplace_back([&, t] {
      try {
        run_member(t);
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
        collective.abort();
      }
    });
  for (std::thread& th : threads) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);

  StepResult result;
  result.loss = losses[0];
  for (int64_t t = 0; t < tp; ++t)
    for (int64_t s = 0; s < pp; ++s) {
      const RankProgram& r = rank_at(s, t);
      std::map<std::string, Tensor> local(grads[size_t(t)][size_t(s)].begin(),
                                          grads[size_t(t)][size_t(s)].end());
      for (const ParamShard& p : r.params()) {
        if (!p.trainable()) continue;
        const Tensor g = local.at(p.name()).grad();
        if (!g.defined()) continue;
        const bool replicated = p.split() == "replicated";
        if (replicated && t != 0) continue;  // every tp rank holds the same gradient
        Tensor& full = result.grads[p.name()];
        if (!full.defined()) full = Tensor::zeros(shape_of(p.full_shape()), DType::F32);
        MERAK_CHECK(g.dtype() == DType::F32, "run_step: gradients are assembled in f32");
        const Tensor gc = g.contiguous();
        int64_t offset = 0;
        for (const Box& b : p.boxes()) {
          const int64_t len = b.sizes(int(p.concat_dim()));
          add_box(full, gc.narrow(p.concat_dim(), offset, len).contiguous(), b);
          offset += len;
        }
      }
    }
  return result;
}

}  // namespace merak::partition
