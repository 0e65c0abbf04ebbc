// Pattern fusion on the imported graph: exports spell layer norm, GELU, linear layers and attention
// out in primitive ops; the registry has one op for each, with a cheaper backward and a cost the
// partitioner understands. Then dead nodes, initializers and value infos are dropped.
#pragma once

#include <map>
#include <string>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"
#include "merak/ops/registry.h"

namespace merak::graph::onnx_detail {

// `metas`: every graph value's type; `constants`: the data of non-trainable initializers.
// Rewrites, in order: matmul with a transposed 2-D weight (+ a bias add) -> linear;
// mean/sub/pow/mean/add/sqrt/div (* w + b) -> layer_norm; 0.5 x (1 + erf(x / sqrt 2)) ->
// gelu(none); 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) -> gelu(tanh);
// softmax(q k^T / c, masked) v -> sdpa (a constant upper-triangle mask becomes causal, not(a
// [B, Tk] bool) a key padding mask); then gelu(linear) -> linear_gelu where nothing else reads
// the product. A fused node takes the name and outputs of the pattern's
// last node and must infer the same type.
void fuse_patterns(Graph& graph, const std::map<std::string, ops::TensorMeta>& metas,
                   const std::map<std::string, Tensor>& constants);

// Drops nodes whose outputs nothing reads, then initializers and value infos no node uses.
void prune(Graph& graph);

}  // namespace merak::graph::onnx_detail
