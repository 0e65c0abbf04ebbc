// Weights that an exporter's constant folding stored transposed under a name of its own.
// PyTorch's export folds by default: a linear layer's x @ W.t() on a 3-D input becomes a MatMul
// reading a new initializer "onnx::MatMul_N" that holds W^T, so the parameter loses both its
// name and its layout, and a tied LM head (wte.weight.t()) becomes a copy that would train
// apart from the embedding. The import undoes both, so a folded export trains, checkpoints and
// exports under the names and layouts of the unfolded one.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>

#include "merak/graph/graph.pb.h"

namespace merak::graph::onnx_detail {

// Finds the exporter's transposed copies in `g` and returns, for each, the weight it is the
// transpose of (copy name -> weight name); the import adds each copy as a permute of that weight
// where it is first used. Two kinds:
//   - tied: a matrix weight named by the exporter ("onnx::...") that holds another weight's
//     transpose value for value (found by value; its bytes read from `external` where they lie
//     there; a copy of one value throughout, as a zero-initialised layer is, ties to nothing):
//     the other weight;
//   - a linear layer's: an exporter-named matrix weight whose only reader is the B input of a
//     MatMul named by PyTorch's module scope ("/blocks.0/attn/qkv/MatMul"), the module's only
//     product (MatMul or Gemm), is the transpose of that module's weight
//     ("blocks.0.attn.qkv.weight"). Its initializer is rewritten in `g` in place: renamed, its
//     dims swapped and its values transposed (those in external data are marked in `external`
//     to be transposed when read). Not when that name is taken in the graph or the node's name
//     has another form. A module whose forward transforms its weight before the product (a
//     scale, weight normalisation) is folded the same way: its copy holds the transformed
//     weight, which the graph cannot tell from the weight itself.
std::map<std::string, std::string> undo_folded_transposes(
    onnx::GraphProto& g, std::map<std::string, ExternalData>& external);

}  // namespace merak::graph::onnx_detail
