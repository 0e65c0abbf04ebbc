#include "merak/runtime/data_parallel.h"

#include "merak/runtime/engine_buckets.h"
#include "merak/runtime/engine_shared_update.h"
#include "merak/runtime/engine_zero.h"

namespace merak::runtime {
namespace {

// AdamW on every parameter this rank holds; under mixed precision on their f32 masters, each
// taking its copy's gradient first and rounded back into it after.
class FullUpdate {
 public:
  FullUpdate(const std::vector<optim::Param>& params, const optim::AdamWOptions& options,
             MixedPrecision* mixed)
      : mixed_(mixed), adamw_(mixed ? mixed->master_params() : params, options) {}

  void step(double lr, float grad_scale) {
    if (mixed_) mixed_->gradients_to_masters();
    adamw_.step(lr, grad_scale);
    if (mixed_) mixed_->masters_to_copies();
  }
  optim::AdamW& adamw() { return adamw_; }
  // Every parameter whole.
  std::vector<ParamPiece> pieces() const {
    std::vector<ParamPiece> whole;
    for (size_t i = 0; i < adamw_.params().size(); ++i)
      whole.push_back({i, 0, adamw_.params()[i].value.numel()});
    return whole;
  }

 private:
  MixedPrecision* mixed_;
  optim::AdamW adamw_;
};

// One replica: nothing to sum, every gradient this rank's to count (on a device in one
// multi-tensor pass).
class OneReplica : public DataParallel {
 public:
  OneReplica(const std::vector<optim::Param>& params, const optim::AdamWOptions& options,
             MixedPrecision* mixed)
      : update_(params, options, mixed) {}

  double sum_of_squares(const std::vector<Tensor>& grads,
                        const std::function<bool(size_t)>& count) const override {
    std::vector<Tensor> counted;
    for (size_t i = 0; i < grads.size(); ++i)
      if (count(i)) counted.push_back(grads[i]);
    return optim::sum_of_squares(counted);
  }
  void step(double lr, float grad_scale) override { update_.step(lr, grad_scale); }
  optim::AdamW& adamw() override { return update_.adamw(); }
  std::vector<ParamPiece> adamw_pieces() const override { return update_.pieces(); }

 private:
  FullUpdate update_;
};

// Replicas summing their gradients in buckets whose all-reduces start as backward finishes them
// (through shared memory on one node, MPI's otherwise), however they hold their parameters.
class Bucketed : public DataParallel {
 public:
  Bucketed(std::unique_ptr<GradBuckets> buckets, std::string parameters)
      : buckets_(std::move(buckets)), parameters_(std::move(parameters)) {}

  void begin_step() override { buckets_->release(); }
  bool watches_backward() const override { return true; }
  void gradient_ready(size_t index) override { buckets_->ready(index); }
  int finish_backward() override { return buckets_->finish(); }
  bool shares_gradients() const override { return buckets_->shares_sums(); }
  std::string transport() const override { return buckets_->transport(); }
  std::string parameters() const override { return parameters_; }
  int64_t shared_bytes() const override { return buckets_->shared_bytes(); }

 protected:
  std::unique_ptr<GradBuckets> buckets_;

 private:
  std::string parameters_;
};

// A parameter copy each, a full update on every replica. The norm counts parameter i on replica
// i mod dp.
class CopyPerReplica : public Bucketed {
 public:
  CopyPerReplica(std::unique_ptr<GradBuckets> buckets, comm::Communicator& dp,
                 const std::vector<optim::Param>& params, const optim::AdamWOptions& options,
                 MixedPrecision* mixed, std::string parameters)
      : Bucketed(std::move(buckets), std::move(parameters)),
        replica_(dp.rank()),
        replicas_(dp.size()),
        update_(params, options, mixed) {}

  double sum_of_squares(const std::vector<Tensor>& grads,
                        const std::function<bool(size_t)>& count) const override {
    std::vector<Tensor> mine;
    for (size_t i = 0; i < grads.size(); ++i)
      if (count(i) && int(i % size_t(replicas_)) == replica_) mine.push_back(grads[i]);
    return optim::sum_of_squares(mine);
  }
  void step(double lr, float grad_scale) override { update_.step(lr, grad_scale); }
  optim::AdamW& adamw() override { return update_.adamw(); }
  std::vector<ParamPiece> adamw_pieces() const override { return update_.pieces(); }

 private:
  int replica_, replicas_;
  FullUpdate update_;
};

// Replicas of one node sharing one parameter copy: the sums read in place, and each replica
// updating the segments of the buckets it added up.
class SharedCopy : public Bucketed {
 public:
  SharedCopy(std::unique_ptr<GradBuckets> buckets, const std::vector<optim::Param>& params,
             std::vector<ParamPiece> mine, const optim::AdamWOptions& options,
             std::string parameters)
      : Bucketed(std::move(buckets), std::move(parameters)),
        params_(params),
        update_(params_, std::move(mine), *buckets_->parameter_copy(), options) {}

  double sum_of_squares(const std::vector<Tensor>&,
                        const std::function<bool(size_t)>& count) const override {
    return update_.sum_of_squares(count);
  }
  void step(double lr, float grad_scale) override { update_.step(lr, grad_scale); }
  optim::AdamW& adamw() override { return update_.adamw(); }
  std::vector<ParamPiece> adamw_pieces() const override { return update_.pieces(); }
  bool state_sharded() const override { return true; }

 private:
  std::vector<optim::Param> params_;  // SharedUpdate keeps a reference: it lives here
  SharedUpdate update_;
};

// ZeRO-1's own exchange: reduce-scatter after backward, AdamW on this replica's segment, then
// an all-gather.
class Zero1 : public DataParallel {
 public:
  Zero1(comm::Communicator& dp, const std::vector<optim::Param>& params,
        const optim::AdamWOptions& options, bool shared_memory)
      : zero_(dp, params, options, shared_memory) {}

  void reduce(const std::vector<Tensor>& grads) override { zero_.reduce_scatter(grads); }
  double sum_of_squares(const std::vector<Tensor>&,
                        const std::function<bool(size_t)>& count) const override {
    return zero_.sum_of_squares(count);
  }
  void step(double lr, float grad_scale) override { zero_.step(lr, grad_scale); }
  optim::AdamW& adamw() override { return zero_.adamw(); }
  std::vector<ParamPiece> adamw_pieces() const override { return zero_.pieces(); }
  bool state_sharded() const override { return true; }
  std::string transport() const override { return "ZeRO-1 over " + zero_.transport(); }
  int64_t shared_bytes() const override { return zero_.shared_bytes(); }

 private:
  ShardedAdamW zero_;
};

}  // namespace

std::unique_ptr<DataParallel> make_data_parallel(comm::Communicator& dp,
                                                 const std::vector<optim::Param>& params,
                                                 const EngineOptions& options,
                                                 MixedPrecision* mixed) {
  const int replicas = dp.size();
  if (replicas == 1) return std::make_unique<OneReplica>(params, options.adamw, mixed);
  if (mixed) {
    // The replicas sum their 16-bit gradients in buckets (as backward finishes them) and each
    // updates its own f32 masters; sharding those masters and moments (ZeRO-1) is not built yet.
    MERAK_CHECK(!options.zero1, "ZeRO-1 with ", dtype_name(mixed->compute()), " compute is not ",
                "supported yet (parallel.zero1: false keeps a full optimizer a replica)");
    return std::make_unique<CopyPerReplica>(
        std::make_unique<GradBuckets>(dp, params, options.bucket_bytes, false), dp, params,
        options.adamw, mixed, "a copy a replica (f32 masters each, 16-bit sums)");
  }
  // Replicas on one node share one parameter copy and split the update, which shards AdamW's
  // state as ZeRO-1 does (and overlaps the sums with backward, with nothing to all-gather): so
  // that is ZeRO-1 there too. Otherwise ZeRO-1 has its own exchange, and plain data parallelism
  // a copy and a full update a replica. (ZeRO-1 without shared parameters needs no buckets: not
  // even their window.)
  if (options.zero1 && !options.dp_shared_params)
    return std::make_unique<Zero1>(dp, params, options.adamw, options.dp_shared_memory);
  auto buckets = std::make_unique<GradBuckets>(dp, params, options.bucket_bytes,
                                               options.dp_shared_memory);
  std::vector<ParamPiece> mine;
  std::string why_not = "turned off";
  if (options.dp_shared_params && buckets->share_parameters(&mine, &why_not))
    return std::make_unique<SharedCopy>(
        std::move(buckets), params, std::move(mine), options.adamw,
        detail::concat("one shared copy, each replica updating 1/", replicas,
                       options.zero1 ? " (ZeRO-1: its moments only)" : ""));
  if (options.zero1) {
    buckets.reset();
    return std::make_unique<Zero1>(dp, params, options.adamw, options.dp_shared_memory);
  }
  return std::make_unique<CopyPerReplica>(std::move(buckets), dp, params, options.adamw,
                                          nullptr, "a copy a replica (not shared: " + why_not +
                                                       ")");
}

}  // namespace merak::runtime
