#include "merak/runtime/engine_params.h"

#include <map>

#include "merak/graph/convert.h"
#include "merak/graph/initializer_values.h"
#include "merak/nn/module.h"
#include "merak/ops/functional.h"

namespace merak::runtime {
namespace {

nn::Init init_of(const graph::InitSpec& spec) {
  switch (spec.kind()) {
    case graph::InitSpec::ZEROS: return nn::Init::zeros();
    case graph::InitSpec::ONES: return nn::Init::ones();
    default: return nn::Init::normal(spec.std());
  }
}

Shape to_shape(const google::protobuf::RepeatedField<int64_t>& dims) {
  return Shape(dims.begin(), dims.end());
}

}  // namespace

Tensor materialize_shard(const partition::ParamShard& shard, uint64_t seed, const Tensor& full) {
  const std::string what = "parameter '" + shard.name() + "'";
  const Shape full_shape = to_shape(shard.full_shape());
  const DType dtype = graph::from_proto(shard.dtype());
  MERAK_CHECK(shard.boxes_size() >= 1, what, ": its shard has no boxes");
  std::vector<Tensor> parts;
  for (const partition::Box& box : shard.boxes()) {
    const Shape offsets = to_shape(box.offsets()), sizes = to_shape(box.sizes());
    MERAK_CHECK(offsets.size() == full_shape.size() && sizes.size() == full_shape.size(), what,
                ": a box of rank ", sizes.size(), " in a tensor of shape ", shape_str(full_shape));
    for (size_t d = 0; d < sizes.size(); ++d)
      MERAK_CHECK(offsets[d] >= 0 && sizes[d] >= 0 && offsets[d] + sizes[d] <= full_shape[d], what,
                  ": box at ", shape_str(offsets), " of ", shape_str(sizes),
                  " lies outside its full shape ", shape_str(full_shape));
    if (full.defined()) {
      Tensor t = full;
      for (size_t d = 0; d < sizes.size(); ++d) t = t.narrow(int64_t(d), offsets[d], sizes[d]);
      parts.push_back(t.clone());
    } else {
      Tensor t = Tensor::empty(sizes, dtype);
      // A box that is the whole tensor is drawn as the whole, exactly as one process draws it.
      const bool whole = sizes == full_shape;
      nn::initialize(t, shard.name(), init_of(shard.init()), seed,
                     whole ? SliceOf{} : SliceOf{full_shape, offsets});
      parts.push_back(t);
    }
  }
  if (parts.size() == 1) return parts[0];
  return ops::concat(parts, shard.concat_dim());
}

graph::Model stage_model(const partition::RankProgram& program, uint64_t seed) {
  graph::Model model;
  *model.mutable_graph() = program.graph();
  std::map<std::string, const partition::ParamShard*> shards;
  for (const partition::ParamShard& s : program.params()) shards[s.name()] = &s;
  for (graph::Initializer& init : *model.mutable_graph()->mutable_initializers()) {
    const std::string what = "parameter '" + init.name() + "'";
    auto it = shards.find(init.name());
    MERAK_CHECK(it != shards.end(), "rank ", program.rank(), ": ", what,
                " is in the stage graph but not among the rank's shards");
    const partition::ParamShard& shard = *it->second;
    const Shape want = graph::fixed_shape(init.type(), what);
    // Values in the plan (an imported network's) are the rank's piece already: the
    // tensor-parallel pass slices them. Without values, the piece is drawn from the init spec.
    const Tensor local = graph::has_values(init) ? graph::initializer_values(init)
                                                 : materialize_shard(shard, seed, Tensor());
    MERAK_CHECK(local.shape() == want, "rank ", program.rank(), ": ", what, ": its boxes make ",
                shape_str(local.shape()), " but the stage graph holds it as ", shape_str(want));
    init.set_data(graph::tensor_bytes(local));
    init.clear_external();
  }
  return model;
}

}  // namespace merak::runtime
