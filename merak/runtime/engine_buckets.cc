#include "merak/runtime/engine_buckets.h"

#include "merak/runtime/engine_comm.h"

namespace merak::runtime {

GradBuckets::GradBuckets(comm::Communicator& group, const std::vector<optim::Param>& params,
                         int64_t bucket_bytes)
    : group_(group), params_(params), bucket_of_(params.size()), final_(params.size(), false) {
  MERAK_CHECK(bucket_bytes > 0, "gradient buckets need a positive size, got ", bucket_bytes);
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& v = params_[k].value;
    MERAK_CHECK(v.dtype() == DType::F32, "gradient reduction: parameter '", params_[k].name,
                "' is ", v.str(), "; expected f32");
    if (buckets_.empty() || (filled > 0 && filled + v.nbytes() > bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().members.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    filled += v.nbytes();
  }
  for (Bucket& b : buckets_) b.missing = int(b.members.size());
}

GradBuckets::~GradBuckets() = default;

void GradBuckets::ready(size_t index) {
  MERAK_CHECK(index < params_.size(), "gradient bucket: no parameter ", index);
  if (!final_[index]) {
    final_[index] = true;
    Bucket& b = buckets_[bucket_of_[index]];
    if (--b.missing == 0) {
      post(b);
      ++posted_early_;
    }
  }
  poll();
}

void GradBuckets::poll() {
  // One test progresses every outstanding operation (MPI's progress engine is global), so only
  // the oldest unfinished bucket is asked; testing each one costs a progress pass apiece.
  for (Bucket& b : buckets_) {
    if (!b.posted) continue;
    if (!b.work.done()) {
      b.work.test();
      return;
    }
  }
}

void GradBuckets::post(Bucket& b) {
  std::vector<Tensor> grads;
  for (size_t k : b.members) {
    const Tensor& p = params_[k].value;
    const Tensor g = p.grad();
    MERAK_CHECK(!g.defined() || (g.dtype() == DType::F32 && g.shape() == p.shape()),
                "gradient of '", params_[k].name, "' is ", g.str(), "; expected f32 ",
                shape_str(p.shape()));
    grads.push_back(g.defined() ? g.contiguous() : Tensor::zeros(p.shape(), DType::F32));
  }
  b.flat = pack_flat(grads);
  b.work = group_.iall_reduce(b.flat, comm::ReduceOp::Sum);
  b.posted = true;
}

int GradBuckets::finish() {
  for (Bucket& b : buckets_)
    if (!b.posted) post(b);
  for (Bucket& b : buckets_) {
    b.work.wait();
    // The sums stay where they arrived: each gradient becomes a view of the bucket.
    int64_t at = 0;
    for (size_t k : b.members) {
      const Tensor& p = params_[k].value;
      p.set_grad(b.flat.narrow(0, at, p.numel()).view(p.shape()));
      at += p.numel();
    }
    b.flat = Tensor();
    b.posted = false;
    b.missing = int(b.members.size());
  }
  final_.assign(final_.size(), false);
  const int early = posted_early_;
  posted_early_ = 0;
  return early;
}

}  // namespace merak::runtime
