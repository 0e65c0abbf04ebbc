// Where a piece of a tensor sits in the global tensor: a box (offset and shape in global
// coordinates), or a run of the box's elements in row-major order (a flat range: what one
// data-parallel replica owns of a shard under ZeRO-1). Any layout's pieces are regions of the
// same global tensors, so reading a checkpoint in another layout is copying the overlaps of the
// regions written into the regions wanted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "merak/core/shape.h"

namespace merak::checkpoint {

struct Region {
  Shape offset;          // of the box in the global tensor
  Shape shape;           // of the box
  int64_t begin = 0;     // the box's elements [begin, end) in row-major order
  int64_t end = -1;      // -1: to the end of the box

  int64_t box_numel() const;
  int64_t flat_end() const { return end < 0 ? box_numel() : end; }
  int64_t numel() const { return flat_end() - begin; }
  // "[0:4, 8:16]" or "[0:4, 8:16] elements 3..40"
  std::string str() const;
};

// Whether the region is well formed inside a tensor of `global` shape; the problem otherwise.
bool region_fits(const Region& r, const Shape& global, std::string* why);

// The whole tensor.
Region whole(const Shape& global);

// Copies the elements that `src` and `dst` have in common from src_data (src.numel() elements,
// the region's order) to dst_data (likewise), `elem` bytes each. Returns how many were copied.
int64_t copy_overlap(const Region& src, const void* src_data, const Region& dst, void* dst_data,
                     size_t elem);
// How many elements `a` and `b` have in common (what copy_overlap would copy), without data.
int64_t overlap_numel(const Region& a, const Region& b);

}  // namespace merak::checkpoint
