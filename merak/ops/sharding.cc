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

DropoutPiece dropout_piece(const Attrs& a, const Shape& x) {
  DropoutPiece p;
  const int64_t dim = a.i("split_dim");
  // The unsplit tensor holds `rows` samples from the global batch's `first_row`: each sample's
  // elements start at its row times the elements a sample has. (A tensor whose elements are not
  // whole samples, rows not dividing them, is placed by its first row alone: other draws than
  // each other micro-batch's still.)
  const int64_t first_row = a.i("first_row"), rows = a.i("rows");
  MERAK_CHECK(first_row >= 0 && rows >= 0, "first_row ", first_row, " and rows ", rows,
              " must not be negative");
  int64_t unsplit = numel(x);
  if (dim >= 0 && dim < int64_t(x.size()) && x[size_t(dim)] > 0)
    unsplit = unsplit / x[size_t(dim)] * a.i("split_size");
  if (rows > 0) p.offset = first_row * (unsplit % rows == 0 ? unsplit / rows : unsplit);
  if (dim < 0) return p;
  const int64_t rank = int64_t(x.size()), size = a.i("split_size"), start = a.i("split_start"),
                runs = a.i("split_runs");
  MERAK_CHECK(dim < rank, "split_dim ", dim, " is out of range for x ", shape_str(x));
  p.local = x[size_t(dim)];
  for (int64_t d = dim + 1; d < rank; ++d) p.inner *= x[size_t(d)];
  MERAK_CHECK(runs >= 1 && size > 0 && p.local % runs == 0 && size % runs == 0,
              "split_runs ", runs, " must divide x's dim ", dim, " (", p.local,
              ") and split_size ", size);
  p.size = size;
  p.start = start;
  p.run = p.local / runs;
  p.gap = size / runs;
  MERAK_CHECK(start >= 0 && start + p.run <= p.gap, "runs of ", p.run, " from split_start ",
              start, " do not lie within runs of ", p.gap, " (split_size ", size, " over ", runs,
              ")");
  return p;
}

}  // namespace merak::ops
