#include "merak/ops/sharding.h"

namespace merak::ops {

std::vector<SbpSignature> alike_splits(const std::vector<TensorMeta>& inputs, size_t outputs,
                                       int64_t except) {
  std::vector<SbpSignature> out;
  const int64_t rank = int64_t(inputs.at(0).shape.size());
  for (int64_t d = 0; d < rank; ++d) {
    if (d == except) continue;
    SbpSignature s;
    for (const TensorMeta& m : inputs) s.inputs.push_back(m.defined ? Sbp::split(d) : Sbp());
    s.outputs.assign(outputs, Sbp::split(d));
    out.push_back(s);
  }
  return out;
}

std::vector<SbpSignature> broadcast_splits(const std::vector<TensorMeta>& inputs,
                                           const Shape& output, int64_t dims) {
  std::vector<SbpSignature> out;
  const int64_t rank = int64_t(output.size());
  for (int64_t d = 0; d < dims; ++d) {
    SbpSignature s;
    for (const TensorMeta& m : inputs) {
      const int64_t aligned = d - (rank - int64_t(m.shape.size()));
      const bool spans = m.defined && aligned >= 0 && m.shape[size_t(aligned)] != 1;
      s.inputs.push_back(spans ? Sbp::split(aligned) : Sbp::broadcast());
    }
    s.outputs.push_back(Sbp::split(d));
    out.push_back(s);
  }
  return out;
}

ShardingRule elementwise_sharding() {
  ShardingRule r;
  r.signatures = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
                    const Attrs&) { return alike_splits(in, out.size()); };
  return r;
}

ShardingRule broadcasting_sharding() {
  ShardingRule r;
  r.signatures = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
                    const Attrs&) {
    return broadcast_splits(in, out[0].shape, int64_t(out[0].shape.size()));
  };
  return r;
}

}  // namespace merak::ops
