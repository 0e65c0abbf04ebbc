// ONNX's shape rules for the shape-manipulating ops, shared by constant folding (which computes
// the values) and conversion (which emits registry ops with the resulting concrete shapes).
#pragma once

#include <cstdint>
#include <vector>

#include "merak/core/shape.h"

namespace merak::graph::onnx_detail {

// An axis in [-rank, rank) made non-negative; throws naming `what` when out of range.
int64_t onnx_axis(int64_t axis, int64_t rank, const char* what);
std::vector<int64_t> onnx_axes(const std::vector<int64_t>& axes, int64_t rank, const char* what);

// Reshape: 0 copies the input's dim (unless allowzero), one -1 is inferred.
Shape reshape_target(const Shape& in, const std::vector<int64_t>& spec, bool allowzero);
Shape unsqueeze_shape(const Shape& in, const std::vector<int64_t>& axes);
// No axes: every size-1 dim goes.
Shape squeeze_shape(const Shape& in, const std::vector<int64_t>& axes);
Shape flatten_shape(const Shape& in, int64_t axis);
// Expand's bidirectional broadcast of the input shape with the requested one.
Shape expand_shape(const Shape& in, const std::vector<int64_t>& requested);

// One axis of a Slice with ONNX's clamping applied: elements start, start + step, ... (count of
// them), step != 0.
struct SliceAxis {
  int64_t axis, start, step, count;
};
std::vector<SliceAxis> slice_axes(const Shape& in, const std::vector<int64_t>& starts,
                                  const std::vector<int64_t>& ends,
                                  const std::vector<int64_t>& axes,
                                  const std::vector<int64_t>& steps);

// Split sizes along `axis`: the given ones (one per output; the registry's split checks that
// they cover the dim), else `outputs` equal pieces (the last one smaller when it does not
// divide, as opset 18 allows).
std::vector<int64_t> split_sizes(const Shape& in, int64_t axis, const std::vector<int64_t>* sizes,
                                 int64_t outputs);

}  // namespace merak::graph::onnx_detail
