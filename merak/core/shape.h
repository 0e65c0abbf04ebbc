// Shapes, strides and broadcasting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace merak {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);   // row-major, in elements
std::string shape_str(const Shape& shape);       // "[2, 3, 4]"
int64_t normalize_dim(int64_t dim, int64_t rank);  // -1 -> rank-1; throws when out of range
// NumPy broadcasting of two shapes; throws naming both when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Replaces one -1 by the size that keeps numel; throws when it cannot.
Shape infer_reshape(const Shape& target, int64_t numel);

}  // namespace merak
