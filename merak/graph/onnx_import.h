// ONNX import: an ONNX file (e.g. a PyTorch export) becomes a Merak graph. The file is checked
// (onnx::checker), shapes are inferred (onnx shape inference) with the dynamic axes bound to
// concrete sizes, shape arithmetic is folded into constants, structural patterns (layer norm,
// GELU) may be fused into registry ops, and initializers become trainable parameters with their
// data. Anything unsupported or inconsistent is an ImportError naming the file, node and op.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "merak/core/shape.h"
#include "merak/graph/graph.pb.h"

namespace merak::graph {

class ImportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ImportOptions {
  // Sizes for the graph inputs' dynamic axes, by input name (e.g. input_ids -> {2, 64}).
  // Inputs not listed must have fixed shapes in the file.
  std::map<std::string, Shape> input_shapes;
  // Sizes for symbolic dims by their name in the file (e.g. batch -> 2, seq -> 64), for the
  // inputs input_shapes does not list.
  std::map<std::string, int64_t> dim_params;
  // Or a shape for an input neither of them lists, asked by the input's name (nothing: none
  // given), e.g. by a trainer that feeds inputs by name from its batches. It may throw
  // ImportError to refuse an input.
  std::function<std::optional<Shape>(const std::string& input)> shape_for;
  // Bytes of all the constants the import holds at once (integer and bool initializers,
  // Constant nodes, what folding computes), each buffer counted once: a small file must not be
  // able to make the importer allocate without bound. One constant is at most 256 MiB.
  int64_t max_constant_bytes = int64_t(1) << 30;
  // Keys a training-mode Dropout's masks, with its output's name (as a built network's dropout
  // is keyed by the seed and its module's path).
  uint64_t seed = 0;
};

Model import_onnx(const std::string& path, const ImportOptions& options = {});
// The same from bytes in memory (`name` stands for the file in messages); the fuzzer uses this.
Model import_onnx_bytes(const std::string& bytes, const std::string& name,
                        const ImportOptions& options = {});

}  // namespace merak::graph
