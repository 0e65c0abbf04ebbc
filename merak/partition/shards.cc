#include "merak/partition/shards.h"

#include "merak/graph/convert.h"

namespace merak::partition {

TpRank whole_model(const graph::Model& model) {
  TpRank r;
  r.model = model;
  for (const graph::Initializer& init : model.graph().initializers()) {
    ShardSpec s;
    BoxSpec box;
    box.sizes = graph::fixed_shape(init.type(), "initializer '" + init.name() + "'");
    box.offsets.assign(box.sizes.size(), 0);
    s.full_shape = box.sizes;
    s.boxes.push_back(box);
    r.shards[init.name()] = s;
  }
  return r;
}

}  // namespace merak::partition
