#include "merak/runtime/engine_buckets.h"

#include <cstring>

#include "merak/runtime/engine_comm.h"

namespace merak::runtime {

GradBuckets::GradBuckets(comm::Communicator& group, const std::vector<optim::Param>& params,
                         int64_t bucket_bytes, bool shared_memory)
    : group_(group), params_(params), bucket_of_(params.size()), final_(params.size(), false) {
  MERAK_CHECK(bucket_bytes > 0, "gradient buckets need a positive size, got ", bucket_bytes);
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& v = params_[k].value;
    const Tensor& first = params_.back().value;
    MERAK_CHECK(is_floating(v.dtype()) && v.dtype() == first.dtype() &&
                    v.device() == first.device(),
                "gradient reduction: parameter '", params_[k].name, "' is ", v.str(),
                "; expected floating point like the others (", first.str(), ")");
    if (buckets_.empty() || (filled > 0 && filled + v.nbytes() > bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().members.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    buckets_.back().floats += v.numel();
    filled += v.nbytes();
  }
  for (Bucket& b : buckets_) b.missing = int(b.members.size());

  std::vector<int64_t> floats;
  for (const Bucket& b : buckets_) floats.push_back(b.floats);
  std::string why_not = "turned off";
  // The window adds up f32 in host memory.
  const bool host_f32 = params_.empty() || (params_[0].value.dtype() == DType::F32 &&
                                             params_[0].value.device().is_cpu());
  if (!host_f32 && shared_memory)
    why_not = "the gradients are " + std::string(dtype_name(params_[0].value.dtype())) + " on " +
              params_[0].value.device().str();
  else
    node_sum_ = comm::NodeSum::create_if(shared_memory, group_, floats, &why_not);
  transport_ = node_sum_ ? "shared memory"
                         : comm::backend_name(group_) + " all-reduce (not shared memory: " +
                               why_not + ")";
}

GradBuckets::~GradBuckets() = default;

bool GradBuckets::share_parameters(std::vector<ParamPiece>* mine, std::string* why_not) {
  if (!node_sum_) {
    *why_not = "the gradient sums do not go through shared memory";
    return false;
  }
  int64_t total = 0;
  for (const Bucket& b : buckets_) total += b.floats;
  shared_params_ = comm::SharedArray::create(group_, total, why_not);
  if (!shared_params_) return false;
  std::vector<float*> place(params_.size());
  float* at = shared_params_->data();
  for (const Bucket& b : buckets_)
    for (size_t k : b.members) {
      place[k] = at;
      at += params_[k].value.numel();
    }
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].value;
    MERAK_CHECK(p.is_contiguous(), "shared parameters: '", params_[k].name, "' is ", p.str(),
                ", not contiguous");
    if (group_.rank() == 0) std::memcpy(place[k], p.data<float>(), size_t(p.nbytes()));
  }
  shared_params_->barrier();
  // Every holder of a parameter (the executor's graph, autograd) shares its TensorImpl, so
  // pointing that at the shared copy moves the parameter for all of them.
  for (size_t k = 0; k < params_.size(); ++k) {
    TensorImpl& impl = params_[k].value.impl();
    impl.storage = Tensor::borrow(place[k], impl.shape).impl().storage;
    impl.offset = 0;
  }
  mine->clear();
  const int me = group_.rank();
  for (size_t i = 0; i < buckets_.size(); ++i)
    append_pieces(params_, buckets_[i].members, 0, node_sum_->segment_begin(int(i), me),
                  node_sum_->segment_begin(int(i), me + 1), mine);
  return true;
}

void GradBuckets::ready(size_t index) {
  MERAK_CHECK(index < params_.size(), "gradient bucket: no parameter ", index);
  if (!final_[index]) {
    final_[index] = true;
    Bucket& b = buckets_[bucket_of_[index]];
    if (--b.missing == 0) {
      post(bucket_of_[index]);
      ++posted_early_;
    }
  }
  poll();
}

void GradBuckets::poll() {
  if (node_sum_) {
    node_sum_->progress();
    return;
  }
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

void GradBuckets::post(size_t index) {
  Bucket& b = buckets_[index];
  std::vector<Tensor> grads;
  for (size_t k : b.members) {
    const Tensor& p = params_[k].value;
    const Tensor g = p.grad();
    MERAK_CHECK(!g.defined() || (g.dtype() == p.dtype() && g.shape() == p.shape()),
                "gradient of '", params_[k].name, "' is ", g.str(), "; expected ",
                dtype_name(p.dtype()), " ", shape_str(p.shape()));
    grads.push_back(g.defined() ? g.contiguous() : Tensor());
  }
  if (node_sum_) {
    // Read in place until the bucket is collected: b.inputs keeps the gradients alive.
    std::vector<comm::NodeSum::Piece> pieces;
    for (size_t i = 0; i < grads.size(); ++i)
      pieces.push_back({grads[i].defined() ? grads[i].data<float>() : nullptr,
                        params_[b.members[i]].value.numel()});
    b.inputs = grads;
    node_sum_->post(int(index), std::move(pieces));
  } else {
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) {
        const Tensor& p = params_[b.members[i]].value;
        grads[i] = Tensor::zeros(p.shape(), p.dtype(), p.device());
      }
    b.flat = pack_flat(grads);
    b.work = group_.iall_reduce(b.flat, comm::ReduceOp::Sum);
  }
  b.posted = true;
}

void GradBuckets::release() {
  if (node_sum_)
    for (int i = 0; i < node_sum_->regions(); ++i) node_sum_->release(i);
}

int GradBuckets::finish() {
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (!buckets_[i].posted) post(i);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    if (node_sum_) {
      // Read in place from the window, no copy out, until release().
      b.flat = Tensor::borrow(const_cast<float*>(node_sum_->sum(int(i))), {b.floats});
      b.inputs.clear();
    } else {
      b.work.wait();
    }
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
