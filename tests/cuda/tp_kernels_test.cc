// Checks of the CUDA kernels of the tensor-parallel ops (kernels/cuda/tp). Everywhere: each op
// has a CUDA kernel registered, and a reduction with no collectives on the thread (no
// ops::TpScope) is refused naming the op and the group. With a GPU:
//   - f32, a group of one: every op through the dispatcher on CUDA against the CPU kernel;
//   - bf16 and f16: the vocabulary-parallel kernels called directly against the CPU's f32
//     results on the same, rounded, inputs (the loss's statistics in the logits' dtype or f32);
//   - a group of two, simulated by two threads, each under a TpScope of its member of an
//     in-process meeting: the members' loss, lse, gradients, embeddings and gathers against the
//     whole-vocabulary CPU ops;
//   - determinism: tp_embedding_grad gives the same bits twice.
// Without a GPU the device checks are reported as skipped. Exit status 1 on any failure.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/tp/collective.h"
#include "merak/core/tensor.h"
#include "merak/cuda/runtime.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/registry.h"
#include "tests/cuda/device_check.h"

namespace merak {
namespace {

const char* kGroup = "tp.pp0.dp0";

using ops::TpReduce;
using ops::Attrs;
using namespace device_check;

// ---- tensors on the host ------------------------------------------------------------------

// Columns [start, start + len) of the last dim, contiguous (a member's part of the vocabulary).
Tensor cols(const Tensor& t, int64_t start, int64_t len) {
  return t.narrow(t.dim() - 1, start, len).contiguous();
}

// ---- a group of two in one process --------------------------------------------------------

// Each member's thread runs under its Member's scope; reduce() waits for both, combines their
// tensors on the host, and writes the result back to each member's device tensor. A member that
// never comes is a failure after a minute, not a hang.
class TwoMembers {
 public:
  class Member : public ops::TpCollectives {
   public:
    Member(TwoMembers& group, int index) : group_(group), index_(index) {}
    void reduce(const Tensor& t, TpReduce op, const std::string& name, int64_t size) override {
      if (name != kGroup || size != 2) throw Error("TwoMembers: unexpected group " + name);
      group_.reduce(index_, t, op);
    }

   private:
    TwoMembers& group_;
    int index_;
  };

  void reduce(int member, const Tensor& t, TpReduce op) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t gen = generation_;
    parts_[member] = values(t);
    if (++arrived_ == 2) {
      const std::vector<double>& a = parts_[0];
      const std::vector<double>& b = parts_[1];
      if (a.size() != b.size()) throw Error("TwoMembers: the members' tensors differ in size");
      result_.resize(a.size());
      for (size_t i = 0; i < a.size(); ++i)
        result_[i] = op == TpReduce::Sum ? double(float(a[i]) + float(b[i])) : std::max(a[i], b[i]);
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return generation_ != gen; })) {
      throw Error("TwoMembers: the other member never joined the reduction");
    }
    Tensor host = Tensor::empty(t.shape(), DType::F32);
    for (size_t i = 0; i < result_.size(); ++i) host.data<float>()[i] = float(result_[i]);
    if (t.dtype() != DType::F32) throw Error("TwoMembers: f32 tensors only");
    cuda::check(cudaMemcpy(t.device_data(), host.raw_data(), size_t(host.nbytes()),
                           cudaMemcpyHostToDevice),
                "TwoMembers: cudaMemcpy");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  std::vector<double> parts_[2], result_;
};

// Member k of a group of two holding classes [start[k], start[k] + len[k]) of the vocabulary.
void check_member(TwoMembers& group, int k, const int64_t start[2], const int64_t len[2]) {
  TwoMembers::Member member(group, k);
  ops::TpScope scope(&member);
  const Device gpu = Device::cuda();
  const std::string who = "member " + std::to_string(k) + ": ";
  const int64_t V = start[1] + len[1];

  // Loss and lse over the whole vocabulary, the gradient of this member's classes.
  const Tensor logits = rand_f32({3, 5, V}, 11, -4, 4);
  const Tensor targets = rand_ids({3, 5}, 12, 0, V, DType::I64, /*ignore_every=*/4);
  const std::vector<Tensor> whole = ops::call("cross_entropy", {logits, targets});
  const Attrs ce = Attrs().set("group", kGroup).set("size", int64_t(2)).set("start", start[k]);
  const std::vector<Tensor> part =
      ops::call("tp_cross_entropy", {cols(logits, start[k], len[k]).to(gpu), targets.to(gpu)}, ce);
  compare(who + "tp_cross_entropy loss", whole[0], part[0], 1e-5);
  compare(who + "tp_cross_entropy lse", whole[1], part[1], 1e-5);
  const Tensor dloss = Tensor::full({}, 1.3);
  const Tensor dwhole = ops::call("cross_entropy_grad", {dloss, logits, targets, whole[1]})[0];
  const Tensor dpart =
      ops::call("tp_cross_entropy_grad",
                {dloss.to(gpu), cols(logits, start[k], len[k]).to(gpu), targets.to(gpu), part[1]},
                Attrs().set("start", start[k]))[0];
  compare(who + "tp_cross_entropy_grad", cols(dwhole, start[k], len[k]), dpart, 1e-5);

  // The embedding: each member's rows, summed over the group, are the whole table's.
  const Tensor table = rand_f32({V, 9}, 13);
  const Tensor ids = rand_ids({4, 6}, 14, 0, V, DType::I32);
  const Tensor y = ops::call("tp_embedding",
                             {table.narrow(0, start[k], len[k]).contiguous().to(gpu), ids.to(gpu)},
                             Attrs().set("start", start[k]))[0];
  const Tensor summed =
      ops::call("tp_all_reduce", {y}, Attrs().set("group", kGroup).set("size", int64_t(2)))[0];
  compare(who + "tp_embedding + tp_all_reduce", ops::call("embedding", {table, ids})[0], summed,
          0);
  const Tensor dy = rand_f32({4, 6, 9}, 15);
  const Tensor dtable = ops::call("embedding_grad", {dy, ids}, Attrs().set("num_embeddings", V))[0];
  const Tensor dmine = ops::call("tp_embedding_grad", {dy.to(gpu), ids.to(gpu)},
                                 Attrs().set("start", start[k]).set("num_embeddings", len[k]))[0];
  compare(who + "tp_embedding_grad", dtable.narrow(0, start[k], len[k]).contiguous(), dmine,
          1e-6);

  // The gather: the members' column blocks side by side.
  const Tensor full = rand_f32({2, 3, V}, 16);
  const Tensor gathered =
      ops::call("tp_all_gather", {cols(full, start[k], len[k]).to(gpu)},
                Attrs().set("group", kGroup).set("size", int64_t(2)).set("index", int64_t(k))
                    .set("sizes", std::vector<int64_t>{len[0], len[1]}).set("dim", int64_t(-1)))[0];
  compare(who + "tp_all_gather", full, gathered, 0);
  const Tensor rows = rand_f32({V, 2}, 17);  // along dim 0: one block per member
  const Tensor stacked =
      ops::call("tp_all_gather", {rows.narrow(0, start[k], len[k]).contiguous().to(gpu)},
                Attrs().set("group", kGroup).set("size", int64_t(2)).set("index", int64_t(k))
                    .set("sizes", std::vector<int64_t>{len[0], len[1]}).set("dim", int64_t(0)))[0];
  compare(who + "tp_all_gather dim 0", rows, stacked, 0);
}

void check_group_of_two() {
  TwoMembers group;
  // Short rows (a warp per row) and long ones (a block per row) on either side.
  const int64_t splits[][2][2] = {{{0, 6}, {6, 5}}, {{0, 1100}, {1100, 1000}}};
  for (const auto& s : splits) {
    const int64_t start[2] = {s[0][0], s[1][0]}, len[2] = {s[0][1], s[1][1]};
    std::thread other([&] {
      try {
        check_member(group, 1, start, len);
      } catch (const std::exception& e) {
        fail(std::string("member 1: ") + e.what());
      }
    });
    try {
      check_member(group, 0, start, len);
    } catch (const std::exception& e) {
      fail(std::string("member 0: ") + e.what());
    }
    other.join();
  }
}

// ---- a group of one: f32 through the dispatcher, bf16 and f16 directly ----------------------

struct Case {
  std::string op, label;
  std::vector<Tensor> inputs;  // host; floating ones f32
  Attrs attrs;
  double tol = 1e-5;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  uint64_t seed = 100;
  auto r = [&](const Shape& s) { return rand_f32(s, seed++); };
  const Attrs one = Attrs().set("group", "tp").set("size", int64_t(1));
  c.push_back({"tp_all_reduce", "[3, 4]", {r({3, 4})}, one, 0});
  c.push_back({"tp_all_gather", "dim 0", {r({3, 2})},
               Attrs(one).set("index", int64_t(0)).set("sizes", std::vector<int64_t>{3})
                   .set("dim", int64_t(0)), 0});

  c.push_back({"tp_embedding", "middle part, i64",
               {r({5, 7}), rand_ids({3, 4}, seed++, 0, 12, DType::I64)},
               Attrs().set("start", int64_t(4)), 0});
  c.push_back({"tp_embedding", "last part, i32, long rows",
               {r({3, 1300}), rand_ids({6}, seed++, 0, 9, DType::I32)},
               Attrs().set("start", int64_t(6)), 0});
  c.push_back({"tp_embedding_grad", "repeats, some outside",
               {r({3, 4, 7}), rand_ids({3, 4}, seed++, 0, 9, DType::I64)},
               Attrs().set("start", int64_t(3)).set("num_embeddings", int64_t(4)), 1e-6});
  c.push_back({"tp_embedding_grad", "i32, long rows",
               {r({40, 300}), rand_ids({40}, seed++, 0, 6, DType::I32)},
               Attrs().set("start", int64_t(2)).set("num_embeddings", int64_t(3)), 1e-6});

  struct Ce {
    const char* label;
    Shape shape;
    int64_t start, vocab;  // targets in [0, vocab)
    DType index;
  };
  const Ce ce[] = {{"offset part, ignored rows", {9, 13}, 5, 30, DType::I64},
                   {"first part, 3-D, i32", {2, 3, 8}, 0, 20, DType::I32},
                   {"long rows", {4, 1500}, 1000, 3000, DType::I64}};
  for (const Ce& e : ce) {
    const Tensor x = rand_f32(e.shape, seed++, -4, 4);
    const Tensor t = rand_ids(Shape(e.shape.begin(), e.shape.end() - 1), seed++, 0, e.vocab,
                              e.index, /*ignore_every=*/3);
    const Attrs a = Attrs(one).set("start", e.start);
    c.push_back({"tp_cross_entropy", e.label, {x, t}, a, 1e-5});
    // lse of a larger vocabulary than this part: the other members' classes add to it.
    Tensor lse = ops::call("tp_cross_entropy", {x, t}, a)[1];
    float* p = lse.data<float>();
    for (int64_t i = 0; i < lse.numel(); ++i) p[i] += 0.4f;
    c.push_back({"tp_cross_entropy_grad", e.label, {Tensor::full({}, 0.7), x, t, lse},
                 Attrs().set("start", e.start), 1e-5});
  }
  c.push_back({"tp_cross_entropy", "all ignored",
               {r({2, 3}), Tensor::full({2}, -1.0, DType::I64)},
               Attrs(one).set("start", int64_t(0)).set("ignore_index", int64_t(-1)), 1e-6});
  return c;
}

std::vector<Tensor> run_cpu(const Case& c) { return ops::call(c.op, c.inputs, c.attrs); }

// The loss's statistics (loss, dloss, lse): in the logits' dtype as the tp op defs give them,
// or in f32 (op_util.h's stat_dtype, as the nn ops keep them); the kernels take both.
bool stat_input(const Case& c, size_t i) {
  return c.op == "tp_cross_entropy_grad" && (i == 0 || i == 3);
}
bool stat_output(const Case& c) { return c.op == "tp_cross_entropy"; }

// The CUDA kernel called directly on inputs whose floating ones are stored as `dtype` (f32 for
// the statistics when f32_stats), outputs shaped like `like` (the CPU's).
std::vector<Tensor> run_cuda_direct(const Case& c, DType dtype, const std::vector<Tensor>& like,
                                    bool f32_stats) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    const bool narrow = floating(t) && !(f32_stats && stat_input(c, i));
    in.push_back(!t.defined() ? t : (narrow ? convert(t, dtype) : t).to(Device::cuda()));
  }
  std::vector<Tensor> out;
  for (const Tensor& t : like) {
    const bool narrow = floating(t) && !(f32_stats && stat_output(c));
    out.push_back(Tensor::empty(t.shape(), narrow ? dtype : t.dtype(), Device::cuda()));
  }
  const ops::OpDef& def = ops::Registry::get().at(c.op);
  (*ops::Registry::get().kernel(c.op, DeviceType::CUDA))(in, out,
                                                         ops::complete_attrs(def, c.attrs));
  return out;
}

double tolerance(const Case& c, DType dtype) { return tolerance_for(c.op, dtype, c.tol); }

void check_case(const Case& c) {
  const std::string name = c.op + " (" + c.label + ")";
  try {
    const std::vector<Tensor> want = run_cpu(c);
    const std::vector<Tensor> got = ops::call(c.op, to_device(c.inputs, Device::cuda()), c.attrs);
    for (size_t i = 0; i < want.size(); ++i)
      compare(name + " f32 output " + std::to_string(i), want[i], got[i], c.tol);
    if (c.op == "tp_embedding_grad") {
      const Tensor a = got[0].to(Device::cpu());
      const Tensor b =
          ops::call(c.op, to_device(c.inputs, Device::cuda()), c.attrs)[0].to(Device::cpu());
      if (a.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) != 0)
        fail(name + ": not deterministic");
    }
    if (c.op == "tp_all_reduce" || c.op == "tp_all_gather") return;  // no arithmetic
    const bool has_stats = c.op == "tp_cross_entropy" || c.op == "tp_cross_entropy_grad";
    for (DType dtype : {DType::BF16, DType::F16}) {
      for (bool f32_stats : {false, true}) {
        if (f32_stats && !has_stats) continue;
        Case rounded = c;
        for (size_t i = 0; i < rounded.inputs.size(); ++i) {
          Tensor& t = rounded.inputs[i];
          if (floating(t) && !(f32_stats && stat_input(c, i)))
            t = convert(convert(t, dtype), DType::F32);
        }
        const std::vector<Tensor> want16 = run_cpu(rounded);
        const std::vector<Tensor> got16 = run_cuda_direct(c, dtype, want16, f32_stats);
        for (size_t i = 0; i < want16.size(); ++i)
          compare(name + " " + dtype_name(dtype) + (f32_stats ? " (f32 stats)" : "") +
                      " output " + std::to_string(i),
                  want16[i], got16[i], tolerance(c, dtype));
      }
    }
  } catch (const std::exception& e) {
    fail(name + ": " + e.what());
  }
}

// ---- the refusal without collectives ----------------------------------------------------------

// Checked on a host tensor: the refusal comes before the tensor's memory is touched.
void check_refusals(const Tensor& t) {
  using cuda_kernels::tp_device_reduce;
  expect_error("no collectives on the thread",
               [&] { tp_device_reduce("tp_all_reduce", t, TpReduce::Sum, kGroup, 2); },
               {"tp_all_reduce", kGroup, "ops::TpScope"});
  // A group of one reduces nothing, with or without collectives.
  tp_device_reduce("tp_all_reduce", t, TpReduce::Sum, kGroup, 1);
}

int run() {
  const char* ops_covered[] = {"tp_all_reduce",    "tp_all_gather",    "tp_embedding",
                               "tp_embedding_grad", "tp_cross_entropy", "tp_cross_entropy_grad"};
  for (const char* op : ops_covered)
    if (!ops::Registry::get().kernel(op, DeviceType::CUDA))
      fail(std::string(op) + ": no CUDA kernel registered");
  check_refusals(Tensor::zeros({4}));
  // Built on the host (their lse through the CPU kernel) everywhere; run only with a GPU.
  std::vector<Case> all;
  try {
    all = cases();
  } catch (const std::exception& e) {
    fail(std::string("building the cases: ") + e.what());
  }

  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("tp_kernels_test: SKIPPED (no GPU: %s): the CUDA tp kernels against the CPU, "
                "a simulated group of two, the refusals through the dispatcher\n",
                why.c_str());
  } else {
    for (const Case& c : all) check_case(c);
    check_group_of_two();
    // Through the dispatcher, on a CUDA tensor.
    const Tensor x = Tensor::ones({2, 3}, DType::F32, Device::cuda());
    const Attrs two = Attrs().set("group", kGroup).set("size", int64_t(2));
    expect_error("tp_all_reduce without collectives",
                 [&] { ops::call("tp_all_reduce", {x}, two); }, {"tp_all_reduce", kGroup});
    expect_error("tp_all_gather without collectives",
                 [&] {
                   ops::call("tp_all_gather", {x},
                             Attrs(two).set("index", int64_t(1))
                                 .set("sizes", std::vector<int64_t>{3, 3}));
                 },
                 {"tp_all_gather", kGroup});
  }
  // Without a GPU only the registrations and the refusals have run: say so, not "passed".
  std::printf("tp_kernels_test: %s (%d failures)\n",
              failures() ? "FAILED" : why.empty() ? "passed" : "passed without the device checks",
              failures());
  return failures() ? 1 : 0;
}

}  // namespace
}  // namespace merak

int main() { return merak::run(); }
