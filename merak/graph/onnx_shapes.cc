#include <algorithm>

#include "merak/core/error.h"
#include "merak/graph/onnx_proto_internal.h"
#include "merak/graph/onnx_shapes_internal.h"

namespace merak::graph::onnx_detail {

int64_t onnx_axis(int64_t axis, int64_t rank, const char* what) {
  MERAK_CHECK(axis >= -rank && axis < rank, what, " ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> onnx_axes(const std::vector<int64_t>& axes, int64_t rank, const char* what) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    const int64_t n = onnx_axis(a, rank, what);
    MERAK_CHECK(std::find(out.begin(), out.end(), n) == out.end(), what, " ", a, " repeats");
    out.push_back(n);
  }
  return out;
}

Shape reshape_target(const Shape& in, const std::vector<int64_t>& spec, bool allowzero) {
  Shape out(spec.begin(), spec.end());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowzero) {
      MERAK_CHECK(i < in.size(), "shape ", shape_str(spec), " copies dim ", i,
                  " (0) but the input ", shape_str(in), " has rank ", in.size());
      out[i] = in[i];
    }
    MERAK_CHECK(out[i] >= -1, "shape ", shape_str(spec), " has a negative size");
  }
  // Bound the known sizes first: infer_reshape multiplies them unchecked.
  Shape known;
  for (int64_t d : out) known.push_back(d == -1 ? 1 : d);
  checked_numel(known, kMaxValueElements, "reshape target");
  return infer_reshape(out, checked_numel(in, kMaxValueElements, "reshape input"));
}

Shape unsqueeze_shape(const Shape& in, const std::vector<int64_t>& axes) {
  const int64_t rank = int64_t(in.size() + axes.size());
  const auto at = onnx_axes(axes, rank, "unsqueeze axis");
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(at.begin(), at.end(), i) != at.end()) {
      out.push_back(1);
    } else {
      out.push_back(in[next++]);
    }
  }
  return out;
}

Shape squeeze_shape(const Shape& in, const std::vector<int64_t>& axes) {
  const auto at = onnx_axes(axes, int64_t(in.size()), "squeeze axis");
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    const bool listed = std::find(at.begin(), at.end(), int64_t(i)) != at.end();
    if (listed) MERAK_CHECK(in[i] == 1, "cannot squeeze dim ", i, " of ", shape_str(in), ": not 1");
    if (listed || (at.empty() && in[i] == 1)) continue;
    out.push_back(in[i]);
  }
  return out;
}

Shape flatten_shape(const Shape& in, int64_t axis) {
  const int64_t rank = int64_t(in.size());
  MERAK_CHECK(axis >= -rank && axis <= rank, "flatten axis ", axis, " out of range for rank ",
              rank);
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= in[size_t(i)];
  return {outer, inner};
}

Shape expand_shape(const Shape& in, const std::vector<int64_t>& requested) {
  for (int64_t d : requested)
    MERAK_CHECK(d >= 0, "expand to ", shape_str(requested), ": negative size");
  return broadcast_shapes(in, Shape(requested.begin(), requested.end()));
}

std::vector<SliceAxis> slice_axes(const Shape& in, const std::vector<int64_t>& starts,
                                  const std::vector<int64_t>& ends,
                                  const std::vector<int64_t>& axes_in,
                                  const std::vector<int64_t>& steps_in) {
  const int64_t rank = int64_t(in.size());
  MERAK_CHECK(starts.size() == ends.size(), "slice has ", starts.size(), " starts but ",
              ends.size(), " ends");
  std::vector<int64_t> axes = axes_in;
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  const std::vector<int64_t> steps =
      steps_in.empty() ? std::vector<int64_t>(starts.size(), 1) : steps_in;
  MERAK_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), "slice has ",
              starts.size(), " starts, ", axes.size(), " axes and ", steps.size(), " steps");
  const auto norm = onnx_axes(axes, rank, "slice axis");
  std::vector<SliceAxis> out;
  for (size_t i = 0; i < norm.size(); ++i) {
    const int64_t dim = in[size_t(norm[i])], step = steps[i];
    MERAK_CHECK(step != 0, "slice step is 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t count;
    if (step > 0) {
      s = std::clamp(s, int64_t(0), dim);
      e = std::clamp(e, int64_t(0), dim);
      count = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp(s, int64_t(0), dim - 1);
      e = std::clamp(e, int64_t(-1), dim - 1);
      count = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    out.push_back({norm[i], s, step, count});
  }
  return out;
}

std::vector<int64_t> split_sizes(const Shape& in, int64_t axis, const std::vector<int64_t>* sizes,
                                 int64_t outputs) {
  const int64_t dim = in[size_t(axis)];
  if (sizes) {
    // That they cover the dim is the registry's split's check, folded or emitted.
    MERAK_CHECK(int64_t(sizes->size()) == outputs, "split has ", sizes->size(), " sizes but ",
                outputs, " outputs");
    return *sizes;
  }
  MERAK_CHECK(outputs > 0, "split has no outputs");
  const int64_t piece = (dim + outputs - 1) / outputs;
  std::vector<int64_t> out;
  int64_t left = dim;
  for (int64_t i = 0; i < outputs; ++i) {
    out.push_back(std::min(piece, left));
    left -= out.back();
  }
  return out;
}

}  // namespace merak::graph::onnx_detail
