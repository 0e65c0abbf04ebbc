#include "merak/runtime/engine_checkpoint.h"

namespace merak::runtime {
namespace {

Shape to_shape(const google::protobuf::RepeatedField<int64_t>& dims) {
  return Shape(dims.begin(), dims.end());
}

}  // namespace

std::vector<LocalRun> shard_runs(const partition::ParamShard& shard, int64_t begin,
                                 int64_t length) {
  const size_t cd = size_t(shard.concat_dim());
  // The local tensor is `rows` rows (the dims before concat_dim), each holding every box's
  // inner block (the dims from concat_dim on) one after another.
  std::vector<int64_t> inner;
  int64_t rows = 1, row = 0;
  for (int k = 0; k < shard.boxes_size(); ++k) {
    const partition::Box& b = shard.boxes(k);
    int64_t n = 1;
    for (int d = int(cd); d < b.sizes_size(); ++d) n *= b.sizes(d);
    inner.push_back(n);
    row += n;
  }
  if (shard.boxes_size() > 0)
    for (size_t d = 0; d < cd; ++d) rows *= shard.boxes(0).sizes(int(d));
  std::vector<LocalRun> out;
  int last_box = -1;
  for (int64_t f = begin, end = begin + length; f < end && row > 0;) {
    const int64_t r = f / row, w = f % row;
    int k = 0;
    int64_t at = 0;
    while (w >= at + inner[size_t(k)]) at += inner[size_t(k++)];
    const int64_t in_box = r * inner[size_t(k)] + (w - at);
    const int64_t run = std::min(end - f, at + inner[size_t(k)] - w);
    if (k == last_box && out.back().region.end == in_box) {
      out.back().region.end += run;  // the box's elements go on: one region
    } else {
      LocalRun lr;
      lr.region.offset = to_shape(shard.boxes(k).offsets());
      lr.region.shape = to_shape(shard.boxes(k).sizes());
      lr.region.begin = in_box;
      lr.region.end = in_box + run;
      lr.local_begin = f;
      out.push_back(lr);
      last_box = k;
    }
    f += run;
  }
  (void)rows;
  return out;
}

void add_state_pieces(const std::string& name, const partition::ParamShard& shard,
                      const Tensor& values, int64_t begin, std::vector<checkpoint::Piece>* out) {
  const Shape global = to_shape(shard.full_shape());
  const Tensor flat = values.view({-1});
  for (const LocalRun& run : shard_runs(shard, begin, flat.numel())) {
    const Tensor part = flat.narrow(0, run.local_begin - begin, run.region.numel());
    out->push_back({name, global, run.region, part.contiguous().to(Device::cpu())});
  }
}

void add_state_reads(const std::string& name, const partition::ParamShard& shard,
                     const Tensor& values, int64_t begin, std::vector<StateRead>* out) {
  const Shape global = to_shape(shard.full_shape());
  const Tensor flat = values.view({-1});
  for (const LocalRun& run : shard_runs(shard, begin, flat.numel())) {
    const Tensor place = flat.narrow(0, run.local_begin - begin, run.region.numel());
    StateRead r;
    r.read = {name, global, DType::F32, run.region, place};
    if (!place.device().is_cpu()) {
      r.read.out = Tensor::empty({run.region.numel()}, DType::F32);
      r.place = place;
    }
    out->push_back(std::move(r));
  }
}

}  // namespace merak::runtime
